//! Rust errors to Python exceptions, with the Rust message: `ValueError` for bad input or
//! parameters, `OSError` for files that cannot be read, `RuntimeError` for device errors,
//! `KeyboardInterrupt` for work stopped by Ctrl-C. Panics never cross into Python:
//! [`compute`] contains them and raises `RuntimeError`.

use pyo3::exceptions::{PyKeyboardInterrupt, PyOSError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;

/// `Result<T, E>` of a biogpu crate as a `PyResult<T>`.
pub(crate) trait IntoPyResult<T> {
    fn py(self) -> PyResult<T>;
}

/// A `ValueError` with `message`.
pub(crate) fn value_error(message: impl Into<String>) -> PyErr {
    PyValueError::new_err(message.into())
}

/// The exception for a gpu-runtime error: a bad device name is the caller's input, the rest
/// (no such device, driver missing, out of memory, kernel failures) are device errors.
fn device_error(e: &gpu_runtime::Error) -> PyErr {
    match e {
        gpu_runtime::Error::BadDeviceName { .. } | gpu_runtime::Error::NoSuchDevice { .. } => {
            PyValueError::new_err(e.to_string())
        }
        _ => PyRuntimeError::new_err(e.to_string()),
    }
}

impl<T> IntoPyResult<T> for Result<T, gpu_runtime::Error> {
    fn py(self) -> PyResult<T> {
        self.map_err(|e| device_error(&e))
    }
}

impl<T> IntoPyResult<T> for speckle_core::Result<T> {
    fn py(self) -> PyResult<T> {
        use speckle_core::Error as E;
        self.map_err(|e| match &e {
            E::Gpu(g) => device_error(g),
            E::Io { .. } => PyOSError::new_err(e.to_string()),
            _ => PyValueError::new_err(e.to_string()),
        })
    }
}

impl<T> IntoPyResult<T> for flim_core::Result<T> {
    fn py(self) -> PyResult<T> {
        use flim_core::Error as E;
        self.map_err(|e| match &e {
            E::Gpu(g) => device_error(g),
            E::Io { .. } => PyOSError::new_err(e.to_string()),
            _ => PyValueError::new_err(e.to_string()),
        })
    }
}

impl<T> IntoPyResult<T> for montecarlo_core::Result<T> {
    fn py(self) -> PyResult<T> {
        use montecarlo_core::Error as E;
        self.map_err(|e| match &e {
            E::Gpu(g) => device_error(g),
            E::GpuPath(_) | E::Check(_) => PyRuntimeError::new_err(e.to_string()),
            E::Io { .. } => PyOSError::new_err(e.to_string()),
            _ => PyValueError::new_err(e.to_string()),
        })
    }
}

impl<T> IntoPyResult<T> for perfusion_core::Result<T> {
    fn py(self) -> PyResult<T> {
        use perfusion_core::Error as E;
        self.map_err(|e| match &e {
            E::Gpu(g) => device_error(g),
            E::Interrupted { .. } => PyKeyboardInterrupt::new_err(e.to_string()),
            E::DemoFailed(_) => PyRuntimeError::new_err(e.to_string()),
            // A file that cannot be read or is malformed, as the other readers.
            E::File { .. } => PyOSError::new_err(e.to_string()),
            _ => PyValueError::new_err(e.to_string()),
        })
    }
}

/// Run `work` with the GIL released (other Python threads go on meanwhile); a panic inside
/// becomes a `RuntimeError` naming it as a biogpu bug instead of unwinding into Python.
pub(crate) fn compute<T, F>(py: Python<'_>, work: F) -> PyResult<T>
where
    T: Send,
    F: FnOnce() -> PyResult<T> + Send,
{
    py.detach(|| gpu_runtime::contain_panic(work))
        .unwrap_or_else(|panic| {
            Err(PyRuntimeError::new_err(format!(
                "internal error in biogpu (please report it): {panic}"
            )))
        })
}

/// [`compute`] for work with a stop flag: `work` runs on its own thread while this one
/// checks for Python signals every 100 ms with the GIL held briefly. On Ctrl-C (or any
/// signal handler that raises) it sets `stop`, waits for `work` to return and raises the
/// handler's exception (`KeyboardInterrupt`), so a long fit or simulation can be stopped from
/// a notebook or a terminal.
pub(crate) fn compute_interruptible<T, F>(
    py: Python<'_>,
    stop: &std::sync::atomic::AtomicBool,
    work: F,
) -> PyResult<T>
where
    T: Send,
    F: FnOnce() -> PyResult<T> + Send,
{
    use std::sync::mpsc::{RecvTimeoutError, channel};
    use std::time::Duration;
    let finish = |r: Result<PyResult<T>, String>| {
        r.unwrap_or_else(|panic| {
            Err(PyRuntimeError::new_err(format!(
                "internal error in biogpu (please report it): {panic}"
            )))
        })
    };
    std::thread::scope(|scope| {
        let (send, receive) = channel();
        // Shared with the GIL-free waits below (a receiver alone is not `Sync`).
        let receive = std::sync::Mutex::new(receive);
        let wait = |timeout: Option<Duration>| {
            let r = receive
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            match timeout {
                Some(t) => r.recv_timeout(t),
                None => r.recv().map_err(|_| RecvTimeoutError::Disconnected),
            }
        };
        scope.spawn(move || {
            // The receiver waits until this arrives; a send can only fail if it is gone.
            let _ = send.send(gpu_runtime::contain_panic(work));
        });
        loop {
            match py.detach(|| wait(Some(Duration::from_millis(100)))) {
                Ok(result) => return finish(result),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(PyRuntimeError::new_err(
                        "internal error in biogpu: the compute thread ended without a result",
                    ));
                }
            }
            if let Err(interrupt) = py.check_signals() {
                stop.store(true, std::sync::atomic::Ordering::Relaxed);
                // Wait for the work to notice the flag (between blocks), then raise.
                let _ = py.detach(|| wait(None));
                return Err(interrupt);
            }
        }
    })
}
