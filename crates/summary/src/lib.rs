//! kiln's run summary: what `kiln run`, `kiln report`, `kiln watch` and `kiln profile` show
//! of a run, as text and as the `--json` summary, and its verdicts (thresholds, JUnit XML),
//! built only from the run record.

pub mod capacity;
pub mod junit;
pub mod names;
pub mod noise;
pub mod profile;
pub mod resources;
pub mod run;
pub mod runtime;
pub mod thresholds;
pub mod wire;
