//! The `gpu_vs_cpu` test binary's own harness (`harness = false`, on `libtest-mimic`): it
//! runs every [`GpuTest`] that [`gpu_test!`](crate::gpu_test) registered and says, in the
//! summary line, how many could not run.
//!
//! Each backend is probed once, before any test runs, and only when a selected test needs
//! it. Then, per backend:
//!
//! - present: its tests run on it, one at a time (`GPU_TURN`), whatever `--test-threads`;
//! - absent: its tests are **ignored** (`test result: ok. 0 passed; 0 failed; 112 ignored`),
//!   and the binary's last line counts them with the reason: `GPU tests skipped: 56 (56
//!   with no cuda device: CUDA driver missing: ...)`;
//! - absent but required (`BIOGPU_REQUIRE_GPU`, see [`required_by`]), or `BIOGPU_DEVICE`
//!   unreadable: its tests fail, each naming the reason.
//!
//! A test body that cannot run on the device it got (no f64, say) calls [`skip`]: the test
//! is ignored with that reason and counted in the same last line.
//!
//! The command line is libtest's: filters (several: a test runs when its name contains any
//! of them), `--exact`, `--skip`, `--list`, `--test-threads`, `--format`, `-q`. Output is
//! never captured (`--nocapture` is accepted and changes nothing). `--ignored` and
//! `--include-ignored` run nothing on a backend that is absent: those tests stay ignored,
//! with the reason, since there is no device to run them on.

use crate::{GPU_TURN, GpuTest, REQUIRE_GPU_ENV};
use gpu_runtime::{Backend, Device, DeviceRequest};
use libtest_mimic::{Arguments, Completion, Conclusion, Failed, FormatSetting, Trial};
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::process::ExitCode;
use std::sync::{Arc, Mutex, PoisonError};

/// The payload [`skip`] unwinds with; the harness turns it into an ignored test.
#[derive(Debug)]
struct Skipped(String);

/// Stop this GPU test here and report it as skipped (ignored, and counted in the binary's
/// last line) with `reason`, e.g. when the device lacks f64. For [`gpu_test!`](crate::gpu_test)
/// bodies only, outside any `proptest!` (which would take the unwind for a failure).
pub fn skip(reason: impl Into<String>) -> ! {
    // `resume_unwind`, not `panic!`: no panic message is printed for a skip.
    resume_unwind(Box::new(Skipped(reason.into())))
}

/// What probing a backend found.
#[derive(Debug, Clone)]
pub enum Probe {
    /// A usable GPU of that backend.
    Found(Device),
    /// None on this machine: why.
    Absent(String),
    /// The request itself is wrong (a `BIOGPU_DEVICE` that does not parse): why.
    Broken(String),
}

/// What the tests of one backend do in this run.
#[derive(Debug, Clone)]
pub enum Plan {
    /// Run on this device.
    Run(Device),
    /// Ignored, counted as skipped: why.
    Skip(String),
    /// Each test fails with this message.
    Fail(String),
}

/// The plan for `backend`'s tests from what its probe found and whether it is required.
pub fn decide(backend: Backend, probe: Probe, required: bool) -> Plan {
    match probe {
        Probe::Found(device) => Plan::Run(device),
        Probe::Absent(why) if required => Plan::Fail(format!(
            "{backend}: the backend is required ({REQUIRE_GPU_ENV}) but not usable: {why}"
        )),
        Probe::Absent(why) => Plan::Skip(why),
        Probe::Broken(why) => Plan::Fail(format!("{backend}: {why}")),
    }
}

/// The device request for `backend`'s tests: the one `named` (`BIOGPU_DEVICE`) gives when
/// it is of that backend (`cuda:1`, `wgpu:0`), else `cuda:0` or the software wgpu adapter
/// (lavapipe), which CI uses.
pub fn request_for(backend: Backend, named: DeviceRequest) -> DeviceRequest {
    match (backend, named) {
        (Backend::Cuda, DeviceRequest::Cuda(i)) => DeviceRequest::Cuda(i),
        (Backend::Cuda, _) => DeviceRequest::Cuda(0),
        (Backend::Wgpu, r @ (DeviceRequest::Wgpu(_) | DeviceRequest::WgpuSoftware)) => r,
        (Backend::Wgpu, _) => DeviceRequest::WgpuSoftware,
        (Backend::Cpu, _) => DeviceRequest::Cpu,
    }
}

/// Whether a missing `backend` fails its tests: `list` (the value of `BIOGPU_REQUIRE_GPU`)
/// names backends (`cuda`, `wgpu`, comma-separated; `cuda:1` counts as `cuda`), or is `1`
/// for the backend `named` (`BIOGPU_DEVICE`) is of.
pub fn required_by(list: Option<&str>, named: Option<DeviceRequest>, backend: Backend) -> bool {
    let Some(list) = list else {
        return false;
    };
    list.split(',').map(str::trim).any(|v| match v {
        "1" => match named {
            Some(DeviceRequest::Cuda(_)) => backend == Backend::Cuda,
            Some(DeviceRequest::Wgpu(_) | DeviceRequest::WgpuSoftware) => backend == Backend::Wgpu,
            _ => false,
        },
        name => name.split(':').next() == Some(&backend.to_string()),
    })
}

/// [`required_by`] with this process's environment.
pub fn required(backend: Backend) -> bool {
    let list = std::env::var(REQUIRE_GPU_ENV).ok();
    required_by(list.as_deref(), DeviceRequest::from_env().ok(), backend)
}

/// Probe `backend` as this process's environment asks (software adapters allowed).
pub fn probe(backend: Backend) -> Probe {
    let named = match DeviceRequest::from_env() {
        Ok(r) => r,
        Err(e) => return Probe::Broken(e.to_string()),
    };
    match Device::select(request_for(backend, named), true) {
        Ok(sel) if sel.device.is_gpu() => Probe::Found(sel.device),
        Ok(sel) => Probe::Absent(sel.notes.join("; ")),
        Err(e) => Probe::Absent(e.to_string()),
    }
}

/// Options of libtest's command line that take a value as the next argument.
const VALUE_OPTIONS: [&str; 6] = [
    "--test-threads",
    "--logfile",
    "--skip",
    "--color",
    "--format",
    "-Z",
];

/// Split a libtest command line into what `libtest-mimic` parses and the filters, since
/// libtest takes several filters (`gpu_vs_cpu base speckle perfusion`) and `libtest-mimic`
/// one.
pub fn split_filters(argv: impl IntoIterator<Item = String>) -> (Vec<String>, Vec<String>) {
    let mut argv = argv.into_iter();
    let mut options: Vec<String> = argv.next().into_iter().collect();
    let mut filters = Vec::new();
    let mut only_filters = false;
    while let Some(a) = argv.next() {
        if only_filters || !a.starts_with('-') || a == "-" {
            filters.push(a);
        } else if a == "--" {
            only_filters = true;
        } else {
            let takes_value = VALUE_OPTIONS.contains(&a.as_str());
            options.push(a);
            if takes_value && let Some(v) = argv.next() {
                options.push(v);
            }
        }
    }
    (options, filters)
}

/// One GPU test on one backend, as the harness runs it: its name (`module::test::backend`,
/// as libtest would name it), backend and body.
pub type Case = (String, Backend, fn(&Device));

/// Every test [`gpu_test!`](crate::gpu_test) registered in this binary, sorted by name as
/// libtest sorts.
pub fn registered() -> Vec<Case> {
    let mut all: Vec<_> = inventory::iter::<GpuTest>
        .into_iter()
        .map(|t| (t.name(), t.backend, t.body))
        .collect();
    all.sort_by(|a, b| a.0.cmp(&b.0));
    all
}

/// What a run did, beyond libtest's counts.
#[derive(Debug)]
pub struct Report {
    pub conclusion: Conclusion,
    /// Selected tests that could not run: those of an absent backend, and those that called
    /// [`skip`].
    pub skipped: usize,
    /// `GPU tests skipped: N (...)`, the line printed last; `None` for `--list`.
    pub line: Option<String>,
}

/// Does `name` pass libtest's positional filters (any of them; all names pass none)?
fn passes(name: &str, filters: &[String], exact: bool) -> bool {
    filters.is_empty()
        || filters.iter().any(|f| {
            if exact {
                name == f
            } else {
                name.contains(f.as_str())
            }
        })
}

/// Put `filters` into `args`: one as libtest-mimic's own filter; several as `--skip`s of
/// every name that passes none (so that libtest-mimic counts them as filtered out), or, in
/// the unlikely case that such a `--skip` would also catch a wanted name as a substring, by
/// dropping those names from `names` (they are then not counted as filtered out).
fn apply_filters(args: &mut Arguments, filters: &[String], names: &mut Vec<String>) {
    match filters {
        [] => {}
        [one] => args.filter = Some(one.clone()),
        many => {
            let unwanted: Vec<String> = names
                .iter()
                .filter(|n| !passes(n, many, args.exact))
                .cloned()
                .collect();
            let mut probe_args = args.clone();
            probe_args.ignored = false;
            probe_args.skip.clone_from(&unwanted);
            let exact_enough = names.iter().all(|n| {
                probe_args.is_filtered_out(&Trial::test(n.clone(), || Ok(())))
                    == unwanted.contains(n)
            });
            if exact_enough {
                args.skip.extend(unwanted);
            } else {
                names.retain(|n| passes(n, many, args.exact));
            }
        }
    }
}

/// Run `cases` as `args` and `filters` ask, each backend's tests as `plan_for` decides (it
/// is asked only about backends with a selected test). Prints libtest's output, then the
/// `GPU tests skipped` line (not for `--list`).
pub fn run_cases(
    mut args: Arguments,
    filters: &[String],
    cases: Vec<Case>,
    mut plan_for: impl FnMut(Backend) -> Plan,
) -> Report {
    let mut names: Vec<String> = cases.iter().map(|c| c.0.clone()).collect();
    apply_filters(&mut args, filters, &mut names);
    let cases: Vec<_> = cases.into_iter().filter(|c| names.contains(&c.0)).collect();

    // Which backends a selected test needs (`--ignored` aside: it selects by the flag that
    // the probe decides).
    let mut selecting = args.clone();
    selecting.ignored = false;
    let mut plans: Vec<(Backend, Plan)> = Vec::new();
    for (name, backend, _) in &cases {
        if !plans.iter().any(|(b, _)| b == backend)
            && !selecting.is_filtered_out(&Trial::test(name.clone(), || Ok(())))
        {
            plans.push((*backend, plan_for(*backend)));
        }
    }

    let to_stderr = args.format == Some(FormatSetting::Json);
    let say = |line: &str| {
        if to_stderr {
            eprintln!("{line}");
        } else {
            println!("{line}");
        }
    };
    if !args.list && !plans.is_empty() {
        say(&devices_line(&plans));
    }

    let runtime_skips: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    let mut device_skips: Vec<(Backend, usize, String)> = Vec::new();
    let mut trials = Vec::with_capacity(cases.len());
    for (name, backend, body) in cases {
        // Backends without a plan have no selected test: theirs are filtered out unrun.
        let plan = plans
            .iter()
            .find(|(b, _)| *b == backend)
            .map_or_else(|| Plan::Fail("not selected".into()), |(_, p)| p.clone());
        let trial = trial(
            name,
            backend,
            body,
            plan.clone(),
            Arc::clone(&runtime_skips),
        )
        .with_ignored_flag(matches!(plan, Plan::Skip(_)));
        if let Plan::Skip(why) = &plan
            && !args.is_filtered_out(&trial)
        {
            match device_skips.iter_mut().find(|(b, _, _)| *b == backend) {
                Some((_, n, _)) => *n += 1,
                None => device_skips.push((backend, 1, why.clone())),
            }
        }
        trials.push(trial);
    }

    let conclusion = libtest_mimic::run(&args, trials);
    if args.list {
        return Report {
            conclusion,
            skipped: 0,
            line: None,
        };
    }
    let runtime = runtime_skips
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    let skipped = device_skips.iter().map(|(_, n, _)| n).sum::<usize>() + runtime.len();
    let line = skip_line(&device_skips, &runtime);
    say(&line);
    Report {
        conclusion,
        skipped,
        line: Some(line),
    }
}

/// The libtest-mimic trial for one case under `plan`.
fn trial(
    name: String,
    backend: Backend,
    body: fn(&Device),
    plan: Plan,
    runtime_skips: Arc<Mutex<Vec<(String, String)>>>,
) -> Trial {
    let label = name.clone();
    Trial::ignorable_test(label, move || match plan {
        Plan::Run(device) => {
            let _turn = GPU_TURN.lock().unwrap_or_else(PoisonError::into_inner);
            match catch_unwind(AssertUnwindSafe(|| body(&device))) {
                Ok(()) => Ok(Completion::Completed),
                Err(payload) => match payload.downcast::<Skipped>() {
                    Ok(skipped) => {
                        let why = one_line(&skipped.0);
                        runtime_skips
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .push((name, why.clone()));
                        Ok(Completion::ignored_with(why))
                    }
                    // A failure: libtest-mimic reports it with the panic's message.
                    Err(panic) => resume_unwind(panic),
                },
            }
        }
        Plan::Skip(why) => Ok(Completion::ignored_with(format!(
            "no {backend} device: {}",
            one_line(&why)
        ))),
        Plan::Fail(why) => Err(Failed::from(why)),
    })
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `GPU devices: cuda: none (why); wgpu: wgpu:software (llvmpipe ...)`.
fn devices_line(plans: &[(Backend, Plan)]) -> String {
    let parts: Vec<String> = plans
        .iter()
        .map(|(backend, plan)| match plan {
            Plan::Run(d) => format!("{backend}: {} ({})", d.info().id, d.info().name),
            Plan::Skip(why) => format!("{backend}: none ({})", one_line(why)),
            Plan::Fail(why) => format!("{backend}: FAILS ({})", one_line(why)),
        })
        .collect();
    format!("GPU devices: {}", parts.join("; "))
}

/// `GPU tests skipped: N (n with no cuda device: why; test: why)`, or `GPU tests skipped: 0`.
pub fn skip_line(
    device_skips: &[(Backend, usize, String)],
    runtime: &[(String, String)],
) -> String {
    let total = device_skips.iter().map(|(_, n, _)| n).sum::<usize>() + runtime.len();
    let mut parts: Vec<String> = device_skips
        .iter()
        .map(|(backend, n, why)| format!("{n} with no {backend} device: {}", one_line(why)))
        .collect();
    parts.extend(runtime.iter().map(|(name, why)| format!("{name}: {why}")));
    if parts.is_empty() {
        format!("GPU tests skipped: {total}")
    } else {
        format!("GPU tests skipped: {total} ({})", parts.join("; "))
    }
}

/// The `gpu_vs_cpu` binary's `main`: parse libtest's command line, probe, run, report.
pub fn main() -> ExitCode {
    let (options, filters) = split_filters(std::env::args());
    let args = Arguments::from_iter(options);
    let report = run_cases(args, &filters, registered(), |backend| {
        decide(backend, probe(backend), required(backend))
    });
    report.conclusion.exit_code()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`run_cases`] with libtest's output in a file, removed after: a `test result:
    /// FAILED` line on stdout would read as this crate's own result.
    fn run(
        extra: &[&str],
        filters: &[String],
        cases: Vec<Case>,
        plan_for: impl FnMut(Backend) -> Plan,
    ) -> Report {
        static RUN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let run = RUN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let log = std::env::temp_dir().join(format!(
            "biogpu-harness-test-{}-{run}.log",
            std::process::id()
        ));
        let mut argv = vec!["gpu_vs_cpu", "--format", "terse", "--test-threads", "1"];
        argv.extend(extra);
        let mut args = Arguments::from_iter(argv);
        args.logfile = Some(log.to_string_lossy().into_owned());
        let report = run_cases(args, filters, cases, plan_for);
        let _ = std::fs::remove_file(&log);
        report
    }

    fn passes_body(_: &Device) {}
    fn panics_body(_: &Device) {
        panic!("GPU and CPU differ");
    }
    fn skips_body(_: &Device) {
        skip("cpu has no f64 arithmetic");
    }

    fn cases() -> Vec<Case> {
        let mut all: Vec<Case> = Vec::new();
        for backend in [Backend::Cuda, Backend::Wgpu] {
            all.push((format!("m::passes::{backend}"), backend, passes_body));
            all.push((format!("m::skips::{backend}"), backend, skips_body));
            all.push((format!("n::passes::{backend}"), backend, passes_body));
        }
        all
    }

    /// cuda absent, wgpu "present" (the CPU device standing in).
    fn plan(backend: Backend, required: bool) -> Plan {
        let probe = match backend {
            Backend::Cuda => Probe::Absent("CUDA driver missing".into()),
            _ => Probe::Found(Device::cpu()),
        };
        decide(backend, probe, required)
    }

    #[test]
    fn an_absent_backend_is_ignored_and_counted_with_its_reason() {
        let r = run(&[], &[], cases(), |b| plan(b, false));
        let c = &r.conclusion;
        assert_eq!(
            (c.num_passed, c.num_failed, c.num_ignored),
            (2, 0, 4),
            "{c:?}"
        );
        // 3 cuda tests without a device, 1 wgpu test that called `skip`.
        assert_eq!(r.skipped, 4);
        assert_eq!(
            r.line.as_deref(),
            Some(
                "GPU tests skipped: 4 (3 with no cuda device: CUDA driver missing; \
                 m::skips::wgpu: cpu has no f64 arithmetic)"
            )
        );
    }

    #[test]
    fn a_required_backend_that_is_absent_fails_its_tests() {
        let r = run(&[], &[], cases(), |b| plan(b, true));
        let c = &r.conclusion;
        assert_eq!(
            (c.num_passed, c.num_failed, c.num_ignored),
            (2, 3, 1),
            "{c:?}"
        );
        assert!(c.has_failed());
        assert_eq!(r.skipped, 1);
    }

    #[test]
    fn ignored_runs_do_not_pretend_an_absent_device_ran() {
        // --ignored: the 3 cuda tests, which stay ignored; --include-ignored: all 6.
        for (flag, passed, ignored) in [("--ignored", 0, 3), ("--include-ignored", 2, 4)] {
            let r = run(&[flag], &[], cases(), |b| plan(b, false));
            let c = &r.conclusion;
            assert_eq!(
                (c.num_passed, c.num_failed, c.num_ignored),
                (passed, 0, ignored),
                "{flag}: {c:?}"
            );
            assert_eq!(r.skipped, ignored as usize, "{flag}");
        }
    }

    #[test]
    fn several_filters_select_as_libtest_and_count_the_rest_filtered_out() {
        let mut asked = Vec::new();
        let filters = ["n::".to_string(), "skips::wgpu".to_string()];
        let r = run(&[], &filters, cases(), |b| {
            asked.push(b);
            plan(b, false)
        });
        let c = &r.conclusion;
        assert_eq!(
            (c.num_passed, c.num_ignored, c.num_filtered_out),
            (1, 2, 3),
            "{c:?}"
        );
        assert_eq!(asked, [Backend::Cuda, Backend::Wgpu]);
        // Only wgpu selected: cuda is not probed, and nothing is skipped for it.
        let mut asked = Vec::new();
        let filters = ["passes::wgpu".to_string()];
        let r = run(&[], &filters, cases(), |b| {
            asked.push(b);
            plan(b, false)
        });
        assert_eq!(asked, [Backend::Wgpu]);
        assert_eq!(r.conclusion.num_passed, 2);
        assert_eq!(r.line.as_deref(), Some("GPU tests skipped: 0"));
        // --exact
        let r = run(
            &["--exact"],
            &["m::passes::wgpu".into(), "n::passes::wgpu".into()],
            cases(),
            |b| plan(b, false),
        );
        assert_eq!(
            (r.conclusion.num_passed, r.conclusion.num_filtered_out),
            (2, 4)
        );
    }

    #[test]
    fn a_panic_is_a_failed_test_and_not_a_skip() {
        let cases: Vec<Case> = vec![("m::panics::wgpu".into(), Backend::Wgpu, panics_body)];
        let r = run(&[], &[], cases, |b| plan(b, false));
        assert_eq!(r.conclusion.num_failed, 1);
        assert_eq!(r.skipped, 0);
    }

    #[test]
    fn requirement_follows_the_environment_values() {
        use Backend::{Cuda, Wgpu};
        let cuda = Some(DeviceRequest::Cuda(0));
        let lavapipe = Some(DeviceRequest::WgpuSoftware);
        assert!(!required_by(None, cuda, Cuda));
        assert!(required_by(Some("1"), cuda, Cuda));
        assert!(!required_by(Some("1"), cuda, Wgpu));
        assert!(required_by(Some("1"), lavapipe, Wgpu));
        assert!(!required_by(Some("1"), Some(DeviceRequest::Auto), Cuda));
        assert!(required_by(Some("wgpu, cuda:1"), None, Cuda));
        assert!(required_by(Some("wgpu, cuda:1"), None, Wgpu));
        assert!(!required_by(Some("0"), cuda, Cuda));
        assert!(matches!(
            decide(Cuda, Probe::Absent("x".into()), false),
            Plan::Skip(_)
        ));
        assert!(matches!(
            decide(Cuda, Probe::Absent("x".into()), true),
            Plan::Fail(_)
        ));
        assert!(matches!(
            decide(Cuda, Probe::Broken("bad name".into()), false),
            Plan::Fail(_)
        ));
        assert_eq!(
            request_for(Wgpu, DeviceRequest::Cuda(1)),
            DeviceRequest::WgpuSoftware
        );
        assert_eq!(
            request_for(Cuda, DeviceRequest::Cuda(1)),
            DeviceRequest::Cuda(1)
        );
    }

    #[test]
    fn several_filters_and_option_values_are_told_apart() {
        let argv = [
            "bin",
            "--test-threads",
            "1",
            "base",
            "--skip",
            "x",
            "speckle::",
            "--exact",
            "--format=terse",
            "perfusion",
        ]
        .map(String::from);
        let (options, filters) = split_filters(argv);
        assert_eq!(filters, ["base", "speckle::", "perfusion"]);
        assert_eq!(
            options,
            [
                "bin",
                "--test-threads",
                "1",
                "--skip",
                "x",
                "--exact",
                "--format=terse"
            ]
        );
        let a = Arguments::from_iter(options);
        assert_eq!((a.test_threads, a.exact), (Some(1), true));
    }

    /// The binary runs only what `gpu_test!` registers: a plain `#[test]` in it would
    /// compile to nothing under `harness = false`, silently.
    #[test]
    fn the_gpu_vs_cpu_binary_has_no_plain_tests() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/gpu_vs_cpu");
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap();
            for (i, line) in text.lines().enumerate() {
                assert!(
                    !line.trim_start().starts_with("#[test]"),
                    "{}:{}: a plain #[test] does not run in this binary; use gpu_test!",
                    path.display(),
                    i + 1
                );
            }
        }
    }
}
