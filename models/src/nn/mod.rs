//! The models. Placeholder: filled in by the learning-core work (issue 2).
