//! Corrections (placeholder).
