//! kiln's run summary: what `kiln run`, `kiln report` and `kiln watch` show of a run, as
//! typed values that serialize to the `--json` summary and render as terminal text.

pub mod resources;
