//! Panics of third-party parsers, contained at the call and turned into errors.
//!
//! Some file-format crates (vtkio, nifti) panic on corrupt input. Readers call them through
//! [`contain_panic`], which catches the panic and keeps it quiet (no "thread panicked"
//! message before the reader's own error); panics anywhere else still reach the previous hook.

use std::cell::Cell;
use std::sync::Once;

thread_local! {
    static CONTAINED: Cell<bool> = const { Cell::new(false) };
}

static INSTALL: Once = Once::new();

/// Run `f`; a panic inside it becomes `Err(message)`, printed by no panic hook.
///
/// ```
/// let r = gpu_runtime::contain_panic(|| -> u8 { panic!("corrupt block") });
/// assert_eq!(r.unwrap_err(), "corrupt block");
/// assert_eq!(gpu_runtime::contain_panic(|| 7).unwrap(), 7);
/// ```
pub fn contain_panic<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    INSTALL.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !CONTAINED.with(Cell::get) {
                previous(info);
            }
        }));
    });
    let outer = CONTAINED.with(|c| c.replace(true));
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    CONTAINED.with(|c| c.set(outer));
    result.map_err(|panic| {
        panic
            .downcast_ref::<&str>()
            .map(ToString::to_string)
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "no message".into())
    })
}
