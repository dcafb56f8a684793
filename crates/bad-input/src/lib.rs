//! Corrupted copies of a valid file, and a runner that feeds them to a reader.
//!
//! Every reader test in the workspace uses the same three families of damage, seeded so a
//! failure reproduces exactly:
//! - [`truncations`]: the file cut at several offsets (empty, inside the header, mid-data,
//!   one byte short);
//! - [`bit_flips`]: single random bit flips, and bursts of flips, at a fixed seed;
//! - [`extreme_values`]: 1-, 2-, 4- and 8-byte fields overwritten with 0, all ones and the
//!   signed maximum at chosen (header) offsets; [`extreme_numbers`] does the same to the
//!   numeric tokens of a text file.
//!
//! [`check_reader`] runs a reader on each case in its own thread and fails the test, naming
//! every offending case, when a reader panics, takes longer than the time limit, or returns an
//! error that does not name the file. Memory is bounded by installing [`CappedAlloc`] as the
//! test binary's global allocator: an allocation that would take the live heap past the cap
//! is refused, which aborts the binary after printing the case being read.
//!
//! ```no_run
//! #[global_allocator]
//! static ALLOC: bad_input::CappedAlloc = bad_input::CappedAlloc::new(2 << 30);
//!
//! let good = std::fs::read("tests/data/small.sdt").unwrap();
//! let mut cases = bad_input::truncations(&good);
//! cases.extend(bad_input::bit_flips(&good, 7, 200));
//! cases.extend(bad_input::extreme_values(&good, &[0, 4, 8]));
//! let report = bad_input::check_reader("sdt", &cases, |p| my_reader(p));
//! report.assert_clean();
//! # fn my_reader(_: &std::path::Path) -> Result<(), String> { Ok(()) }
//! ```

mod alloc;
mod cases;
mod runner;

pub use self::alloc::CappedAlloc;
pub use self::cases::{Case, bit_flips, extreme_numbers, extreme_values, truncations};
pub use self::runner::{Outcome, Report, check_reader, check_reader_with};
