//! Image builder (filled by the foundation issue).
