//! Shatter's wire format. Placeholder while the protocol work (issue 4) lands.

pub mod control;
