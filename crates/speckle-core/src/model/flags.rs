//! Bits of the per-pixel flag maps, shared by the CPU reference and the GPU kernels
//! (`gpu_kernels::speckle` uses the same values).

/// K (or the value derived from it) is undefined: zero or non-positive mean, NaN input.
/// The value is NaN.
pub const UNDEFINED: u8 = 1;
/// The window contains a pixel at or above the saturation level, so K is biased low.
/// (Contrast flags only; flow maps keep their own bits, OR the maps to combine.)
pub const SATURATED: u8 = 2;
/// Flow: K^2 >= beta, no decorrelation detected; tau_c is +inf.
pub const NO_MOTION: u8 = 4;
/// Flow: K = 0 (or K^2 <= 0), decorrelation faster than resolvable; tau_c is 0.
pub const NO_CONTRAST: u8 = 8;
/// Correction: shot noise alone explains the measured K^2 (corrected K^2 < 0); K is NaN.
pub const NOISE_DOMINATED: u8 = 16;
