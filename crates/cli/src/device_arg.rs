//! `--device` as given: one device (`auto`, `cpu`, `cuda:1`, ...) or, for the commands that
//! split photons over several GPUs (`mc run` and `mc bench`), a comma list (`cuda:0,cuda:1`)
//! or every GPU of a backend (`cuda:all`, `wgpu:all`). Parsing probes nothing, so the form
//! is checked against the command before any driver is touched.

use anyhow::{Context, bail};
use gpu_runtime::{Backend, Choice, Device, DeviceRequest, JobEstimate, KernelCache, Selection};
use std::collections::HashSet;

/// What `--device` names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceArg {
    /// One device, resolved as before (`auto` may fall back to the CPU with a notice).
    One(DeviceRequest),
    /// Several GPUs of one backend, each named (`cuda:0,cuda:2`).
    List(Vec<DeviceRequest>),
    /// Every GPU of a backend (`cuda:all`, `wgpu:all`).
    All(Backend),
}

impl DeviceArg {
    /// Parse `--device`. Lists hold GPUs of one backend, each once: `auto` and `cpu` have no
    /// place in a list (the CPU path already uses every core), and a device named twice or
    /// a mix of backends is refused rather than guessed at.
    pub fn parse(given: &str) -> anyhow::Result<DeviceArg> {
        let text = given.trim().to_ascii_lowercase();
        if let Some((kind, "all")) = text.split_once(':') {
            return match kind {
                "cuda" => Ok(DeviceArg::All(Backend::Cuda)),
                "wgpu" => Ok(DeviceArg::All(Backend::Wgpu)),
                _ => bail!(
                    "unknown device `{given}`: only cuda:all and wgpu:all name every device of \
                     a backend"
                ),
            };
        }
        if !text.contains(',') {
            return Ok(DeviceArg::One(given.parse()?));
        }
        let mut list = Vec::new();
        let mut seen = HashSet::new();
        for item in text.split(',').map(str::trim) {
            if item.is_empty() {
                bail!("empty entry in the device list `{given}`: expected e.g. cuda:0,cuda:1");
            }
            if item.ends_with(":all") {
                bail!("`{item}` cannot be part of a device list (`{given}`): give it alone");
            }
            let request: DeviceRequest = item
                .parse()
                .with_context(|| format!("in the device list `{given}`"))?;
            match request {
                DeviceRequest::Auto | DeviceRequest::Cpu => bail!(
                    "`{item}` cannot be part of a device list (`{given}`): a list names GPUs \
                     (e.g. cuda:0,cuda:1); the CPU path already uses every core"
                ),
                _ => {}
            }
            if !seen.insert(request) {
                bail!("{request} is named twice in the device list `{given}`");
            }
            list.push(request);
        }
        let cuda = |r: &DeviceRequest| matches!(r, DeviceRequest::Cuda(_));
        if !(list.iter().all(cuda) || list.iter().all(|r| !cuda(r))) {
            bail!("the device list `{given}` mixes cuda and wgpu devices: use one backend");
        }
        Ok(DeviceArg::List(list))
    }

    /// Whether this names more than one device (a list or `X:all`), which only the commands
    /// that split photons accept. `cuda:all` on a one-GPU machine still counts: the form,
    /// not the machine, decides, so a command line means the same everywhere.
    pub fn is_many(&self) -> bool {
        !matches!(self, DeviceArg::One(_))
    }

    /// The devices, probed: one for [`DeviceArg::One`] (printing the notice when `auto` falls
    /// back to the CPU), else every device named or found.
    pub fn resolve(&self) -> anyhow::Result<Vec<Device>> {
        match self {
            // `auto` probes on a background thread while the command reads its input.
            DeviceArg::One(DeviceRequest::Auto) => Ok(vec![Device::auto_in_background()]),
            DeviceArg::One(request) => Ok(vec![select(*request)?]),
            DeviceArg::List(requests) => requests.iter().map(|r| select(*r)).collect(),
            DeviceArg::All(backend) => Ok(Device::all_of(*backend)?),
        }
    }
}

/// The device for a job of a command run on `device` ([`Device::for_job`]): the choice and
/// its reason logged (`-v`), and a note on stderr when `auto`'s GPU is to compile this
/// build's kernels first (`main` says it for a GPU asked for by name).
pub fn choose(device: &Device, job: JobEstimate) -> Choice {
    let choice = device.for_job(job);
    tracing::info!("{}", choice.reason);
    crate::record::note_device(&choice.device, &choice.reason);
    let cuda = choice.device.backend() == Backend::Cuda;
    if cuda && choice.device.picked_by_auto() {
        note_first_compile();
    }
    choice
}

/// Say on stderr that CUDA kernels are about to be compiled, when this build's kernel cache
/// is still empty (the wait of a first run is then explained).
pub fn note_first_compile() {
    if !KernelCache::of_this_build().is_filled() {
        eprintln!(
            "biogpu: first GPU run of this build here: its kernels are compiled as they are \
             first used (1-5 s, once; `biogpu devices` shows where they are kept)"
        );
    }
}

/// Resolve one request, printing the one-line notice when `auto` falls back to the CPU.
fn select(request: DeviceRequest) -> anyhow::Result<Device> {
    let Selection { device, notes } = Device::select(request, false)?;
    for note in notes {
        eprintln!("biogpu: {note}");
    }
    tracing::info!(device = %device, "selected device");
    Ok(device)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_names_parse_as_before() {
        for (s, want) in [
            ("auto", DeviceRequest::Auto),
            ("cpu", DeviceRequest::Cpu),
            ("cuda:1", DeviceRequest::Cuda(1)),
            ("wgpu:software", DeviceRequest::WgpuSoftware),
        ] {
            let arg = DeviceArg::parse(s).unwrap();
            assert_eq!(arg, DeviceArg::One(want), "{s}");
            assert!(!arg.is_many());
        }
        let e = DeviceArg::parse("tpu").unwrap_err().to_string();
        assert!(e.contains("unknown device `tpu`"), "{e}");
    }

    #[test]
    fn lists_and_all_parse() {
        assert_eq!(
            DeviceArg::parse("cuda:0,cuda:1").unwrap(),
            DeviceArg::List(vec![DeviceRequest::Cuda(0), DeviceRequest::Cuda(1)])
        );
        assert_eq!(
            DeviceArg::parse(" CUDA:2 , cuda:0 ").unwrap(),
            DeviceArg::List(vec![DeviceRequest::Cuda(2), DeviceRequest::Cuda(0)])
        );
        assert_eq!(
            DeviceArg::parse("cuda:all").unwrap(),
            DeviceArg::All(Backend::Cuda)
        );
        assert_eq!(
            DeviceArg::parse("wgpu:all").unwrap(),
            DeviceArg::All(Backend::Wgpu)
        );
        assert!(DeviceArg::parse("cuda:all").unwrap().is_many());
        assert!(DeviceArg::parse("wgpu:0,wgpu:1").unwrap().is_many());
    }

    #[test]
    fn bad_lists_say_what_is_wrong() {
        for (s, want) in [
            ("cuda:0,", "empty entry"),
            ("cuda:0,,cuda:1", "empty entry"),
            ("cuda:0,cpu", "`cpu` cannot be part of a device list"),
            ("auto,cuda:1", "`auto` cannot be part of a device list"),
            ("cuda:0,cuda:0", "cuda:0 is named twice"),
            ("cuda,cuda:0", "cuda:0 is named twice"),
            ("cuda:0,wgpu:0", "mixes cuda and wgpu"),
            (
                "cuda:all,cuda:1",
                "`cuda:all` cannot be part of a device list",
            ),
            ("cpu:all", "only cuda:all and wgpu:all"),
            ("cuda:0,tpu", "unknown device `tpu`"),
        ] {
            let e = DeviceArg::parse(s).unwrap_err();
            let text = format!("{e:#}");
            assert!(text.contains(want), "{s}: {text}");
        }
    }

    /// `cuda:all` finds every CUDA device, or (on a machine without CUDA, such as CI) fails
    /// naming `cuda:all` and why, never with an empty list.
    #[test]
    fn cuda_all_resolves_or_says_why_not() {
        match DeviceArg::All(Backend::Cuda).resolve() {
            Ok(devices) => {
                assert!(!devices.is_empty());
                assert!(devices.iter().all(|d| d.backend() == Backend::Cuda));
            }
            Err(e) => {
                let text = e.to_string();
                assert!(
                    text.contains("no such device `cuda:all`") && text.contains("CUDA"),
                    "{text}"
                );
            }
        }
    }
}
