//! MESI (placeholder).
