//! The Shatter node. Placeholder: filled in by issue 4.
