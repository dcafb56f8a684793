//! `biogpu`: raw biomedical imaging data to quantitative maps, on the GPU or the CPU.

mod commands;
mod device_arg;
mod record;

use clap::{Parser, Subcommand};
use device_arg::DeviceArg;
use gpu_runtime::Device;
use std::process::ExitCode;

const ABOUT: &str = "Raw biomedical imaging data to quantitative maps, on the GPU (CUDA or wgpu) with an exact CPU path.";

const LONG_ABOUT: &str = "\
Raw biomedical imaging data to quantitative maps, on the GPU (CUDA or wgpu) with an exact CPU path.

Modalities:
  speckle     Laser speckle contrast imaging: raw frames to speckle contrast K, SFI and
              decorrelation-time (flow) maps; spatial, temporal and multi-exposure.
  flim        Time-domain fluorescence lifetime imaging: TCSPC decay histograms to lifetime
              maps (RLD, IEM, CMM, phasor, BCMM, least-squares and maximum-likelihood fits).
  mc          Monte Carlo light transport in tetrahedral meshes (hop-drop-spin, Fresnel,
              roulette): absorbed energy and fluence per tetrahedron.
  perfusion   DCE perfusion: voxelwise pharmacokinetic fits (dual-input liver model, Tofts,
              extended Tofts, Patlak, 2CXM).

Devices: `--device auto` (default) uses a CUDA GPU, else a hardware wgpu GPU (Vulkan, Metal,
DX12), else the CPU. `biogpu devices` lists what this machine has. `mc run` and `mc bench`
also take several GPUs and split the photons over them: `--device cuda:all` (every CUDA GPU)
or a list such as `--device cuda:0,cuda:1`.";

#[derive(Debug, Parser)]
#[command(name = "biogpu", version, about = ABOUT, long_about = LONG_ABOUT)]
struct Cli {
    /// Device: auto, cpu, cuda, cuda:N, wgpu, wgpu:N or wgpu:software (lavapipe); for
    /// `mc run` and `mc bench` also several GPUs: cuda:all, wgpu:all or a list (cuda:0,cuda:1).
    #[arg(long, global = true, env = gpu_runtime::DEVICE_ENV, default_value = "auto")]
    device: String,
    /// More log output (-v info, -vv debug with kernel and transfer spans).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    /// Print the run's summary as JSON on stdout (the same document as its summary.json,
    /// provenance included; one per output folder); messages go to stderr.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// List every device with its facts, and the one `auto` picks.
    Devices(commands::devices::Args),
    /// Run each modality on built-in data and check the device against the CPU.
    Demo(commands::demo::Args),
    /// Laser speckle contrast imaging: contrast, flow (tau_c), MESI, ROI time courses.
    Speckle(Box<commands::speckle::Args>),
    /// Fluorescence lifetime imaging: TCSPC decays to lifetime maps.
    Flim(Box<commands::flim::Args>),
    /// Monte Carlo light transport in tetrahedral meshes.
    Mc(Box<commands::mc::Args>),
    /// DCE perfusion: voxelwise pharmacokinetic fits.
    Perfusion(Box<commands::perfusion::Args>),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell) to stdout.
    Completions(commands::help_files::CompletionsArgs),
    /// Print the man page (roff) to stdout, or write one page per command into a folder.
    Man(commands::help_files::ManArgs),
}

fn main() -> ExitCode {
    let started = std::time::Instant::now();
    end_quietly_on_closed_stdout();
    quiet_vulkan_loader();
    let cli = parse_cli();
    init_logging(cli.verbose);
    let outcome = run(cli).and_then(|()| record::print_json());
    // With -vv: the whole command's wall time from main, beside the spans of its phases.
    tracing::debug!(ms = started.elapsed().as_secs_f64() * 1e3, "command done");
    let code = report(outcome);
    if gpu_runtime::cuda_was_started() {
        exit_without_driver_teardown(code);
    }
    code
}

/// The exit status of a command, its error (if any) printed with each cause once.
fn report(outcome: anyhow::Result<()>) -> ExitCode {
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // A wrapper often quotes its cause already (`x.tif: No such file ...`): print each
            // cause only where the line above does not already say it.
            let mut above = e.to_string();
            eprintln!("error: {above}");
            for cause in e.chain().skip(1) {
                let text = cause.to_string();
                if !above.contains(&text) {
                    eprintln!("  caused by: {text}");
                }
                above = text;
            }
            ExitCode::FAILURE
        }
    }
}

/// End the process now, skipping the CUDA driver's tear-down of its context at exit
/// (0.1-0.2 s on a server GPU; the kernel frees the device's memory either way). Every
/// output is written and closed by now; only the standard streams need flushing.
fn exit_without_driver_teardown(code: ExitCode) -> ! {
    use std::io::Write;
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    let status = i32::from(code != ExitCode::SUCCESS);
    // SAFETY: `_exit` ends the process without running atexit handlers; no Rust destructor
    // is pending (main's values are dropped or hold no resources beyond the process).
    unsafe { libc::_exit(status) }
}

/// The command line, with negative numbers taken as values everywhere (`--exposure -1`
/// reaches the check that explains why it is wrong, instead of clap's "unexpected argument").
///
/// The run's record ([`record::begin`]) starts here, with every argument as parsed.
fn parse_cli() -> Cli {
    use clap::FromArgMatches;
    let command = cli_command();
    let matches = command.clone().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    record::begin(&command, &matches, cli.json);
    cli
}

/// The clap definition as parsed: negative numbers are values in every subcommand.
fn cli_command() -> clap::Command {
    use clap::CommandFactory;
    fn negatives(command: clap::Command) -> clap::Command {
        command
            .allow_negative_numbers(true)
            .mut_subcommands(negatives)
    }
    negatives(Cli::command())
}

fn run(cli: Cli) -> anyhow::Result<()> {
    // Commands that need no device answer before any probing.
    match &cli.command {
        Command::Devices(args) => return commands::devices::run(args),
        Command::Completions(args) => {
            return commands::help_files::completions(args, cli_command());
        }
        Command::Man(args) => return commands::help_files::man(args, cli_command()),
        _ => {}
    }
    // Nor do the driver probe and the GPU's context for one that computes nothing on it.
    let needs_device = match &cli.command {
        Command::Mc(args) => args.needs_device(),
        Command::Perfusion(args) => args.needs_device(),
        _ => true,
    };
    let devices = if needs_device {
        let _span = tracing::debug_span!("select_device").entered();
        device_arg_for(&cli)?.resolve()?
    } else {
        vec![Device::cpu()]
    };
    record::note_devices(&devices);
    // The GPU's context and kernel cache open while the command reads its input.
    for device in &devices {
        device.open_in_background();
    }
    // CubeCL keeps compiled kernels on disk for CUDA only (wgpu compiles its shaders fast).
    // `auto`'s pick is not waited for here: the commands say it when they choose.
    let cuda = devices
        .iter()
        .any(|d| !d.is_pending() && d.backend() == gpu_runtime::Backend::Cuda);
    if cuda {
        device_arg::note_first_compile();
    }
    match cli.command {
        Command::Devices(args) => commands::devices::run(&args),
        Command::Completions(args) => commands::help_files::completions(&args, cli_command()),
        Command::Man(args) => commands::help_files::man(&args, cli_command()),
        Command::Demo(args) => commands::demo::run(&args, one(&devices)?),
        Command::Speckle(args) => commands::speckle::run(*args, one(&devices)?),
        Command::Flim(args) => commands::flim::run(*args, one(&devices)?),
        Command::Mc(args) => commands::mc::run(*args, &devices),
        Command::Perfusion(args) => commands::perfusion::run(*args, one(&devices)?),
    }
}

/// The one device of a command that runs on one ([`device_arg_for`] let no list through).
fn one(devices: &[Device]) -> anyhow::Result<&Device> {
    match devices {
        [device] => Ok(device),
        _ => anyhow::bail!("one device expected, {} given", devices.len()),
    }
}

/// `--device` parsed and checked against the command (before any driver is probed): several
/// devices (`cuda:all`, `cuda:0,cuda:1`) only for the commands that split photons over them.
fn device_arg_for(cli: &Cli) -> anyhow::Result<DeviceArg> {
    let arg = DeviceArg::parse(&cli.device)?;
    let (splits, name) = match &cli.command {
        Command::Mc(args) => (args.splits_photons(), args.name()),
        Command::Devices(_) => (false, "devices"),
        Command::Completions(_) => (false, "completions"),
        Command::Man(_) => (false, "man"),
        Command::Demo(_) => (false, "demo"),
        Command::Speckle(_) => (false, "speckle"),
        Command::Flim(_) => (false, "flim"),
        Command::Perfusion(_) => (false, "perfusion"),
    };
    if arg.is_many() && !splits {
        anyhow::bail!(
            "--device {} splits photons only for `mc run` and `mc bench`; `{name}` runs on one \
             device: give one, e.g. --device cuda:0",
            cli.device.trim()
        );
    }
    Ok(arg)
}

fn init_logging(verbose: u8) {
    use tracing_subscriber::EnvFilter;
    let default = match verbose {
        0 => "warn",
        1 => "info",
        _ => "debug,wgpu_core=warn,wgpu_hal=warn,naga=warn,cubecl=info",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    // From -vv on, each span's busy and idle time when it closes: where the wall time goes.
    let spans = if verbose >= 2 {
        tracing_subscriber::fmt::format::FmtSpan::CLOSE
    } else {
        tracing_subscriber::fmt::format::FmtSpan::NONE
    };
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_span_events(spans)
        .with_writer(std::io::stderr)
        .try_init();
}

/// A closed stdout (`biogpu perfusion models | head -1`) ends the process quietly, as it
/// does other Unix tools, instead of a panic in `println!` (Rust ignores SIGPIPE by default).
fn end_quietly_on_closed_stdout() {
    #[cfg(unix)]
    // SAFETY: called first thing in main, before any other thread exists; it restores the
    // default action of one signal.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// Mesa's Vulkan drivers print "XDG_RUNTIME_DIR is invalid" on headless machines while
/// biogpu only lists adapters; give them a private runtime dir so that noise goes away.
fn quiet_vulkan_loader() {
    if std::env::var_os("XDG_RUNTIME_DIR").is_none() {
        let dir = std::env::temp_dir().join(format!("biogpu-runtime-{}", std::process::id()));
        if std::fs::create_dir_all(&dir).is_ok() {
            // SAFETY: called first thing in main, before any other thread exists.
            unsafe { std::env::set_var("XDG_RUNTIME_DIR", &dir) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpu_runtime::{Backend, DeviceRequest};

    fn cli(line: &[&str]) -> Cli {
        Cli::try_parse_from(std::iter::once("biogpu").chain(line.iter().copied())).unwrap()
    }

    /// `mc run` and `mc bench` take several devices, as a list or `cuda:all`; one device
    /// still works everywhere.
    #[test]
    fn mc_run_and_bench_take_several_devices() {
        let arg = device_arg_for(&cli(&["--device", "cuda:all", "mc", "run", "sim.json"])).unwrap();
        assert_eq!(arg, DeviceArg::All(Backend::Cuda));
        let arg =
            device_arg_for(&cli(&["--device", "cuda:0,cuda:1", "mc", "bench", "head"])).unwrap();
        assert_eq!(
            arg,
            DeviceArg::List(vec![DeviceRequest::Cuda(0), DeviceRequest::Cuda(1)])
        );
        for line in [
            &["--device", "cuda:1", "demo"][..],
            &["--device", "cpu", "mc", "example"],
            &["mc", "bench", "cube60"],
        ] {
            assert!(!device_arg_for(&cli(line)).unwrap().is_many(), "{line:?}");
        }
    }

    /// Every other command refuses several devices, naming itself and the two that split.
    #[test]
    fn other_commands_refuse_several_devices() {
        for (line, name) in [
            (&["--device", "cuda:all", "demo"][..], "`demo`"),
            (
                &["--device", "cuda:0,cuda:1", "mc", "example"],
                "`mc example`",
            ),
            (&["--device", "wgpu:all", "mc", "mesh", "head"], "`mc mesh`"),
            (
                &["--device", "cuda:all", "perfusion", "models"],
                "`perfusion`",
            ),
        ] {
            let e = device_arg_for(&cli(line)).unwrap_err().to_string();
            assert!(
                e.contains("splits photons only for `mc run` and `mc bench`") && e.contains(name),
                "{line:?}: {e}"
            );
        }
    }

    /// `cuda:all` on a machine without CUDA (CI, this one) fails before any work with the
    /// reason; with CUDA it finds every device (checked by `Device::all_of`'s own test).
    #[test]
    fn cuda_all_without_cuda_is_a_clear_error() {
        if Device::all_of(Backend::Cuda).is_ok() {
            eprintln!("CUDA present: the no-CUDA message is not reachable here");
            return;
        }
        let e = run(cli(&["--device", "cuda:all", "mc", "bench", "cube60"]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("no such device `cuda:all`") && e.contains("CUDA"),
            "{e}"
        );
    }
}
