//! Traffic harness (owned by the lab/harness work).
