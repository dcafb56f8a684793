//! Compiled kernels kept on disk between runs.
//!
//! On CUDA every kernel is compiled by NVRTC the first time a process launches it: about
//! 5 s for the f64 perfusion kernels, most of a short CLI run. CubeCL can keep the PTX in a
//! file cache, but keys it by kernel name and compile-time settings, not by the kernel's
//! code, so biogpu gives each build of the running program its own folder (named from the
//! executable's size and modification time): a rebuilt kernel never meets stale PTX.
//! The driver keeps its own cache of the machine code made from that PTX.
//!
//! `BIOGPU_KERNEL_CACHE=off` turns the cache off; `BIOGPU_KERNEL_CACHE=DIR` puts it in `DIR`
//! (the default is `$XDG_CACHE_HOME/biogpu/kernels`, else `~/.cache/biogpu/kernels`). A
//! `cubecl.toml` that names a cache of its own is left alone.

use cubecl::config::{CubeClRuntimeConfig, RuntimeConfig, cache::CacheConfig};
use std::hash::{Hash, Hasher};
use std::path::PathBuf;
use std::sync::{Arc, Once};

/// Environment variable: a folder for the kernel cache, or `off`.
pub const KERNEL_CACHE_ENV: &str = "BIOGPU_KERNEL_CACHE";

/// Point CubeCL's compilation cache at this build's folder, once, before the first device
/// opens. Does nothing when CubeCL's configuration was already read.
pub(crate) fn configure() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let mut state = CubeClRuntimeConfig::storage().lock();
        if state.is_some() {
            return;
        }
        let mut config = CubeClRuntimeConfig::from_current_dir().override_from_env();
        if config.compilation.cache.is_none() {
            config.compilation.cache = build_folder().map(CacheConfig::File);
        }
        tracing::debug!(cache = ?config.compilation.cache, "kernel cache");
        *state = Some(Arc::new(config));
    });
}

/// Where this build keeps its compiled kernels, and how much is there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelCache {
    /// This build's folder; `None` when the cache is off (`BIOGPU_KERNEL_CACHE=off`) or no
    /// folder can be named.
    pub dir: Option<PathBuf>,
    /// Bytes of compiled kernels in it (0 before the first GPU run of this build).
    pub bytes: u64,
}

impl KernelCache {
    /// The cache of the running build, read from disk now.
    ///
    /// ```
    /// let cache = gpu_runtime::KernelCache::of_this_build();
    /// if cache.dir.is_none() { assert_eq!(cache.bytes, 0); }
    /// ```
    pub fn of_this_build() -> Self {
        let dir = build_folder();
        let bytes = dir.as_deref().map_or(0, |d| bytes_under(d, 4));
        KernelCache { dir, bytes }
    }

    /// Whether a GPU run finds its kernels compiled (some run of this build filled it).
    pub fn is_filled(&self) -> bool {
        self.bytes > 0
    }
}

fn bytes_under(dir: &std::path::Path, depth: u32) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_file() => e.metadata().map_or(0, |m| m.len()),
            Ok(t) if t.is_dir() && depth > 0 => bytes_under(&e.path(), depth - 1),
            _ => 0,
        })
        .sum()
}

pub(crate) fn is_filled() -> bool {
    KernelCache::of_this_build().is_filled()
}

/// This build's cache folder, or `None` when the cache is off or no folder can be named.
fn build_folder() -> Option<PathBuf> {
    let base = match std::env::var_os(KERNEL_CACHE_ENV) {
        Some(v) if v == "off" || v == "0" || v.is_empty() => return None,
        Some(v) => PathBuf::from(v),
        None => default_base()?,
    };
    Some(base.join(build_id()?))
}

fn default_base() -> Option<PathBuf> {
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .or_else(|| std::env::var_os("LOCALAPPDATA").map(PathBuf::from))?;
    Some(cache.join("biogpu").join("kernels"))
}

/// A name for the running executable's build: its size and modification time, hashed.
fn build_id() -> Option<String> {
    let meta = std::env::current_exe().ok()?.metadata().ok()?;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    meta.len().hash(&mut h);
    meta.modified().ok()?.hash(&mut h);
    Some(format!("{:016x}", h.finish()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_build_id_is_stable_within_a_run_and_names_a_folder() {
        let a = build_id().expect("the test binary has metadata");
        assert_eq!(Some(a.clone()), build_id());
        assert_eq!(a.len(), 16);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
    }
}
