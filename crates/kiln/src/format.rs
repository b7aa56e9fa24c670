//! How the binary shows numbers and outside text: the record's shared formatting.

pub use kiln_record::text::*;
