//! What the CPU and GPU paths agree on, defined once: pixel and frame types, windows and
//! borders, parameters, formulas, flag bits, statuses, result maps and the GPU tuning.

pub mod beta;
pub mod contrast;
pub mod flags;
pub mod flow;
pub mod flow_table;
pub mod frame;
pub mod mesi;
pub mod roi;
pub mod stream;
pub mod tuning;
pub mod types;
pub mod window;
