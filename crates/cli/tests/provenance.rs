//! Every output traced to its command and inputs: the provenance block of summary.json and
//! provenance.json, `--json` on stdout, the note in TIFFs, completions and man pages.

use crate::common::{biogpu, scratch};
use sha2::{Digest, Sha256};
use std::path::Path;

/// A 32x32 16-bit grey PNG of speckle-like values.
fn frame(path: &Path) {
    let file = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut png = png::Encoder::new(file, 32, 32);
    png.set_color(png::ColorType::Grayscale);
    png.set_depth(png::BitDepth::Sixteen);
    let pixels: Vec<u8> = (0..32 * 32)
        .flat_map(|i: u16| (100 + (i * 37) % 50).to_be_bytes())
        .collect();
    let mut writer = png.write_header().unwrap();
    writer.write_image_data(&pixels).unwrap();
    writer.finish().unwrap();
}

fn sha256(path: &Path) -> String {
    use std::fmt::Write;
    Sha256::digest(std::fs::read(path).unwrap())
        .iter()
        .fold(String::new(), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

fn json(bytes: &[u8]) -> serde_json::Value {
    serde_json::from_slice(bytes)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(bytes)))
}

/// The field names of the table in docs/provenance.md.
fn documented_fields() -> Vec<String> {
    let doc = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/provenance.md"),
    )
    .unwrap();
    let fields: Vec<String> = doc
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
        .map(String::from)
        .collect();
    assert!(fields.len() >= 12, "{fields:?}");
    fields
}

/// `--json` prints exactly the summary.json written (provenance included) and nothing
/// else on stdout; every documented field is there, with the input's SHA-256, the command
/// line, and defaults marked as such.
#[test]
fn json_on_stdout_is_the_summary_with_its_provenance() {
    let dir = scratch("prov-json");
    let input = dir.join("frame.png");
    frame(&input);
    let out = dir.join("out");
    let run = biogpu(&[
        "speckle",
        "contrast",
        input.to_str().unwrap(),
        "--window",
        "5",
        "--out",
        out.to_str().unwrap(),
        "--json",
    ]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let printed = json(&run.stdout);
    let written = json(&std::fs::read(out.join("summary.json")).unwrap());
    assert_eq!(printed, written);
    let p = &written["provenance"];
    for field in documented_fields() {
        assert!(p.get(&field).is_some(), "`{field}` missing from {p:#}");
    }
    assert_eq!(p["command"], "speckle contrast");
    assert_eq!(p["biogpu"]["version"], env!("CARGO_PKG_VERSION"));
    assert!(p["biogpu"]["git_commit"].as_str().unwrap().len() >= 7);
    assert!(
        p["command_line"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a == "--window")
    );
    assert_eq!(p["parameters"]["window"]["value"], "5");
    assert_eq!(p["parameters"]["window"]["source"], "command line");
    assert_eq!(p["parameters"]["mode"]["source"], "default");
    assert_eq!(p["devices"][0]["id"], "cpu");
    assert!(
        p["library"]["precision"].is_string(),
        "the verb's own record: {p:#}"
    );
    let inputs = p["inputs"].as_array().unwrap();
    assert_eq!(inputs.len(), 1, "{inputs:?}");
    assert_eq!(inputs[0]["sha256"], sha256(&input));
    assert_eq!(inputs[0]["bytes"], std::fs::metadata(&input).unwrap().len());
    // The TIFF says where its record is.
    let tif = std::fs::read(out.join("k.tif")).unwrap();
    let note = b"provenance in summary.json/provenance.json";
    assert!(tif.windows(note.len()).any(|w| w == note));
    std::fs::remove_dir_all(&dir).ok();
}

/// A folder without a summary gets provenance.json; a second run there refuses.
#[test]
fn a_folder_without_a_summary_gets_provenance_json() {
    let dir = scratch("prov-roi");
    let input = dir.join("frame.png");
    frame(&input);
    let out = dir.join("roi");
    let args = [
        "speckle",
        "roi",
        input.to_str().unwrap(),
        "--roi",
        "0,0,8,8",
        "--out",
        out.to_str().unwrap(),
        "--json",
    ];
    let run = biogpu(&args);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let written = json(&std::fs::read(out.join("provenance.json")).unwrap());
    assert_eq!(json(&run.stdout), written);
    assert_eq!(written["provenance"]["inputs"][0]["sha256"], sha256(&input));
    let outputs = written["outputs"].as_array().unwrap();
    assert!(outputs.iter().any(|o| o == "roi.csv"), "{outputs:?}");
    let again = biogpu(&args);
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("provenance.json"));
    std::fs::remove_dir_all(&dir).ok();
}

/// The seed that reproduces a random run is recorded with where it came from.
#[test]
fn a_monte_carlo_run_records_its_seed() {
    let dir = scratch("prov-mc");
    let mut sim = json(&biogpu(&["mc", "example"]).stdout);
    sim["photons"] = 2000.into();
    let file = dir.join("sim.json");
    std::fs::write(&file, sim.to_string()).unwrap();
    let out = dir.join("out");
    let run = biogpu(&[
        "mc",
        "run",
        file.to_str().unwrap(),
        "--seed",
        "11",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let summary = json(&std::fs::read(out.join("summary.json")).unwrap());
    assert_eq!(summary["provenance"]["seeds"]["seed"], "11");
    assert_eq!(summary["provenance"]["inputs"][0]["sha256"], sha256(&file));
    std::fs::remove_dir_all(&dir).ok();
}

/// Commands without an output folder print their answer under `--json`, stdout holding
/// JSON only.
#[test]
fn devices_and_mc_example_print_json_only() {
    for args in [&["devices", "--json"][..], &["mc", "example", "--json"]] {
        let run = biogpu(args);
        assert!(run.status.success(), "{args:?}");
        let doc = json(&run.stdout);
        assert!(
            doc["provenance"]["command"].is_string(),
            "{args:?}: {doc:#}"
        );
    }
    let example = json(&biogpu(&["mc", "example", "--json"]).stdout);
    assert!(example["simulation"]["photons"].is_number(), "{example:#}");
    // Without --json, `mc example` is still the bare simulation file.
    let bare = json(&biogpu(&["mc", "example"]).stdout);
    assert!(bare.get("provenance").is_none());
}

/// Completion scripts for each shell name the subcommands; the man page is roff.
#[test]
fn completions_and_man_pages_come_from_the_command_line_definition() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let run = biogpu(&["completions", shell]);
        assert!(run.status.success(), "{shell}");
        let text = String::from_utf8_lossy(&run.stdout);
        assert!(
            text.contains("perfusion") && text.contains("device"),
            "{shell}"
        );
    }
    let bad = biogpu(&["completions", "tcsh"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("possible values"));
    let man = biogpu(&["man"]);
    assert!(String::from_utf8_lossy(&man.stdout).contains(".TH biogpu 1"));
    let dir = scratch("prov-man");
    let pages = dir.join("man1");
    assert!(
        biogpu(&["man", "--out", pages.to_str().unwrap()])
            .status
            .success()
    );
    assert!(pages.join("biogpu-flim-fit.1").is_file());
    assert!(!pages.join("provenance.json").exists());
    let again = biogpu(&["man", "--out", pages.to_str().unwrap()]);
    assert!(!again.status.success(), "existing pages are not replaced");
    assert!(
        biogpu(&["man", "--out", pages.to_str().unwrap(), "--force"])
            .status
            .success()
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// A batch prints one document per input, and each output folder records only its own
/// input, not the batch's others.
#[test]
fn each_output_of_a_batch_records_its_own_input() {
    let dir = scratch("prov-batch");
    let (a, b) = (dir.join("a.png"), dir.join("b.png"));
    frame(&a);
    frame(&b);
    let out = dir.join("out");
    let run = biogpu(&[
        "speckle",
        "contrast",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--json",
    ]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let docs: Vec<serde_json::Value> = serde_json::Deserializer::from_slice(&run.stdout)
        .into_iter()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(docs.len(), 2);
    for (name, input) in [("a", &a), ("b", &b)] {
        let summary = json(&std::fs::read(out.join(name).join("summary.json")).unwrap());
        let inputs = summary["provenance"]["inputs"].as_array().unwrap();
        assert_eq!(inputs.len(), 1, "{name}: {inputs:?}");
        assert_eq!(inputs[0]["sha256"], sha256(input));
        assert!(docs.contains(&summary));
    }
    std::fs::remove_dir_all(&dir).ok();
}
