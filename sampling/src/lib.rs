//! Sans-IO Cyclon peer sampling and the per-round overlay. Placeholder: filled in by issue 3.
