//! Control messages (Cyclon, overlay). Placeholder: filled in by the sampling work (issue 3).
