//! Panics on CubeCL's device-service threads, turned into errors.
//!
//! CubeCL 0.10 compiles kernels on a per-device service thread and, when the kernel
//! expansion panics there (an unsupported operation, say), catches the panic, logs a
//! warning and carries on: the launch silently does nothing. A process-wide panic hook
//! records such panics so that the next checked call (`Gpu::launch`, `sync`, `download`)
//! returns an error instead of stale or zero data.

use std::sync::{Mutex, Once};

static FAULTS: Mutex<Vec<String>> = Mutex::new(Vec::new());
static INSTALL: Once = Once::new();

/// Install the hook (once per process). Panics elsewhere go to the previous hook.
pub(crate) fn install() {
    INSTALL.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let on_device_thread = std::thread::current()
                .name()
                .is_some_and(|n| n.starts_with("DS"));
            if on_device_thread {
                let message = info
                    .payload()
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| {
                        info.payload()
                            .downcast_ref::<&str>()
                            .map(|s| (*s).to_string())
                    })
                    .unwrap_or_else(|| "unknown panic".into());
                let at = info
                    .location()
                    .map(|l| format!(" (at {}:{})", l.file(), l.line()))
                    .unwrap_or_default();
                tracing::debug!(%message, "device service thread panicked");
                if let Ok(mut faults) = FAULTS.lock() {
                    faults.push(format!("{message}{at}"));
                }
            } else {
                previous(info);
            }
        }));
    });
}

/// Faults recorded since the last call.
pub(crate) fn take() -> Vec<String> {
    FAULTS
        .lock()
        .map(|mut f| std::mem::take(&mut *f))
        .unwrap_or_default()
}
