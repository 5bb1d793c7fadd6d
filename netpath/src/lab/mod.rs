//! Embedded netns lab (owned by the lab/harness work).
