//! Corrupt and hostile input for every Monte Carlo reader (issue 20): each valid file cut
//! short, bit-flipped and given extreme numbers or field values, read in its own thread under
//! a 2 GiB heap cap (an allocation past it aborts the binary, naming the case); every case must
//! read or give an error naming the file, never panic or hang. Then one regression test per
//! reported case.

#[global_allocator]
static ALLOC: bad_input::CappedAlloc = bad_input::CappedAlloc::new(2 << 30);

use bad_input::{
    Case, Outcome, Report, bit_flips, check_reader, extreme_numbers, extreme_values, truncations,
};
use montecarlo_core::io::{gmsh, mmc, timos, vtk};
use montecarlo_core::sim::generate;
use montecarlo_core::{Mesh, Simulation};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

const SEED: u64 = 20;

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("mc-bad-input-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn data(name: &str) -> Vec<u8> {
    std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data")
            .join(name),
    )
    .unwrap()
}

/// A 2 x 2 x 2 mm box, 1 mm cells, 5 tets each: 27 nodes, 40 tetrahedra.
fn small_mesh() -> Mesh {
    generate::box_mesh([0.0; 3], [2.0; 3], 1.0, 5).unwrap()
}

fn timos_mesh(m: &Mesh) -> String {
    let mut s = format!("{}\n{}\n", m.nodes.len(), m.len());
    for p in &m.nodes {
        writeln!(s, "{} {} {}", p[0], p[1], p[2]).unwrap();
    }
    for t in 1..=m.len() {
        let n = m.tets[t];
        let r = m.regions[t];
        writeln!(s, "{} {} {} {} {r}", n[0] + 1, n[1] + 1, n[2] + 1, n[3] + 1).unwrap();
    }
    s
}

fn mmc_node(m: &Mesh) -> String {
    let mut s = format!("1\t{}\n", m.nodes.len());
    for (i, p) in m.nodes.iter().enumerate() {
        writeln!(s, "{}\t{}\t{}\t{}", i + 1, p[0], p[1], p[2]).unwrap();
    }
    s
}

fn mmc_elem(m: &Mesh) -> String {
    let mut s = format!("1\t{}\n", m.len());
    for t in 1..=m.len() {
        let n = m.tets[t];
        writeln!(
            s,
            "{t}\t{}\t{}\t{}\t{}\t1",
            n[0] + 1,
            n[1] + 1,
            n[2] + 1,
            n[3] + 1
        )
        .unwrap();
    }
    s
}

const OPT: &str = "1\n2\n0.05 10 0.9 1.3\n0.1 20 0.8 1.4\n1\n1.0\n";
const SOURCE: &str = "2\n1 1.0 1.1 1.2 1000\n11 3 1.0 1.0 0.0 0 0 1 2000\n";

/// A simulation file: a generated box, inline material, a pencil beam, gates.
const SIM_JSON: &str = r#"{
  "mesh": {"box": {"origin": [0, 0, 0], "size": [4, 4, 4], "cell": 2, "tets_per_cell": 5}},
  "materials": [{"mua": 0.1, "mus": 1.0, "g": 0.9, "n": 1.37}],
  "n_outside": 1.0,
  "sources": [{"type": "pencil", "pos": [2.1, 2.2, 0.0], "dir": [0, 0, 1]}],
  "photons": 1000,
  "seed": 3,
  "time_limit_ns": 5.0,
  "outputs": {"gates": {"width_ns": 0.5, "count": 4}}
}"#;

/// Truncations, `flips` bit-flipped copies and the extreme numbers of a text file.
fn text_cases(good: &str, flips: usize, numbers: usize) -> Vec<Case> {
    let mut cases = truncations(good.as_bytes());
    cases.extend(bit_flips(good.as_bytes(), SEED, flips));
    cases.extend(extreme_numbers(good, numbers));
    cases
}

/// Truncations, bit flips and extreme values at the header offsets of a binary file.
fn binary_cases(good: &[u8], flips: usize, offsets: &[usize]) -> Vec<Case> {
    let mut cases = truncations(good);
    cases.extend(bit_flips(good, SEED, flips));
    cases.extend(extreme_values(good, offsets));
    cases
}

/// `good` with the text `from` replaced by each of `to` (ASCII counts of binary files).
fn replaced(good: &[u8], from: &str, to: &[&str]) -> Vec<Case> {
    let at = good
        .windows(from.len())
        .position(|w| w == from.as_bytes())
        .unwrap_or_else(|| panic!("`{from}` not in the file"));
    to.iter()
        .map(|t| {
            let mut b = good[..at].to_vec();
            b.extend_from_slice(t.as_bytes());
            b.extend_from_slice(&good[at + from.len()..]);
            Case::new(format!("`{from}` replaced by `{t}`"), b)
        })
        .collect()
}

fn report(label: &str, r: &Report) {
    eprintln!("[{label}] {r}");
    r.assert_clean();
}

/// [`report`], and no cut of `good` (other than of trailing whitespace) reads as a mesh:
/// header and data must agree.
fn report_no_short_read(label: &str, r: &Report, good: &[u8]) {
    report(label, r);
    let short: Vec<&str> = r
        .outcomes
        .iter()
        .filter(|(l, o)| {
            let cut = l
                .strip_prefix("truncated to ")
                .and_then(|x| x.split(' ').next())
                .and_then(|k| k.parse::<usize>().ok());
            *o == Outcome::Read && cut.is_some_and(|k| !good[k..].trim_ascii().is_empty())
        })
        .map(|(l, _)| l.as_str())
        .collect();
    assert!(
        short.is_empty(),
        "{label}: read although cut short: {short:?}"
    );
}

/// Offset just past the first `marker` and the line after it (`skip_lines` more lines).
fn after(b: &[u8], marker: &str, skip_lines: usize) -> usize {
    let mut at = b
        .windows(marker.len())
        .position(|w| w == marker.as_bytes())
        .unwrap_or_else(|| panic!("`{marker}` not found"))
        + marker.len();
    for _ in 0..skip_lines {
        at += b[at..].iter().position(|&c| c == b'\n').unwrap() + 1;
    }
    at
}

/// Counts a reader must refuse or survive.
const COUNTS: [&str; 6] = ["0", "1", "4294967295", "18446744073709551615", "-1", "1e12"];

/// `good` with the count `old` after `before` replaced by each of [`COUNTS`] (`old` ends
/// with its separator, kept).
fn counts(good: &[u8], before: &str, old: &str) -> Vec<Case> {
    let sep = &old[old.trim_end().len()..];
    let to: Vec<String> = COUNTS.iter().map(|c| format!("{before}{c}{sep}")).collect();
    let to: Vec<&str> = to.iter().map(String::as_str).collect();
    replaced(good, &format!("{before}{old}"), &to)
}

#[test]
fn timos_files_survive_corruption() {
    let mesh = timos_mesh(&small_mesh());
    let r = check_reader("mesh", &text_cases(&mesh, 300, 60), timos::read_mesh);
    report_no_short_read("timos .mesh", &r, mesh.as_bytes());
    let r = check_reader("opt", &text_cases(OPT, 200, 20), timos::read_opt);
    report_no_short_read("timos .opt", &r, OPT.as_bytes());
    let r = check_reader("source", &text_cases(SOURCE, 200, 20), timos::read_source);
    report_no_short_read("timos .source", &r, SOURCE.as_bytes());
}

#[test]
fn mmc_files_survive_corruption() {
    let dir = scratch("mmc");
    let m = small_mesh();
    let (node, elem) = (mmc_node(&m), mmc_elem(&m));
    let good_node = dir.join("node_good.dat");
    let good_elem = dir.join("elem_good.dat");
    std::fs::write(&good_node, &node).unwrap();
    std::fs::write(&good_elem, &elem).unwrap();
    assert_eq!(
        mmc::read_mmc_mesh(&good_node, &good_elem).unwrap().len(),
        40
    );
    let e = good_elem.clone();
    let r = check_reader("dat", &text_cases(&node, 300, 40), move |p| {
        mmc::read_mmc_mesh(p, &e)
    });
    report_no_short_read("mmc node", &r, node.as_bytes());
    let n = good_node.clone();
    let r = check_reader("dat", &text_cases(&elem, 300, 40), move |p| {
        mmc::read_mmc_mesh(&n, p)
    });
    report_no_short_read("mmc elem", &r, elem.as_bytes());
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn gmsh_files_survive_corruption() {
    for name in ["gmsh_22_ascii.msh", "gmsh_41_ascii.msh"] {
        let good = String::from_utf8(data(name)).unwrap();
        let r = check_reader("msh", &text_cases(&good, 300, 60), gmsh::read_gmsh);
        report_no_short_read(name, &r, good.as_bytes());
    }
    // Binary 2.2: the ASCII node and element counts, the first node record, the first
    // element block header and record.
    let good = data("gmsh_22_bin.msh");
    let nodes = after(&good, "$Nodes\n", 1);
    let elements = after(&good, "$Elements\n", 1);
    let offsets = [
        nodes,
        nodes + 4,
        elements,
        elements + 4,
        elements + 8,
        elements + 12,
    ];
    let mut cases = binary_cases(&good, 300, &offsets);
    cases.extend(counts(&good, "$Nodes\n", "93\n"));
    cases.extend(counts(&good, "$Elements\n", "267\n"));
    let r = check_reader("msh", &cases, gmsh::read_gmsh);
    report_no_short_read("gmsh_22_bin.msh", &r, &good);
    // Binary 4.1: the entity counts, the $Nodes and $Elements headers and first blocks.
    let good = data("gmsh_41_bin.msh");
    let ent = after(&good, "$Entities\n", 0);
    let nodes = after(&good, "$Nodes\n", 0);
    let elements = after(&good, "$Elements\n", 0);
    let mut offsets: Vec<usize> = (0..4).map(|k| ent + 8 * k).collect();
    for base in [nodes, elements] {
        offsets.extend((0..4).map(|k| base + 8 * k));
        offsets.extend([base + 32, base + 36, base + 40, base + 44]);
    }
    let r = check_reader("msh", &binary_cases(&good, 300, &offsets), gmsh::read_gmsh);
    report_no_short_read("gmsh_41_bin.msh", &r, &good);
}

/// The first compressed data array of `meshio.vtu` with its block header `[nb, nu, np, nc]`
/// (u32, little-endian) replaced.
fn vtu_with_header(good: &str, header: [u32; 4]) -> Vec<u8> {
    const OLD: &str = "AQAAAACAAAC4CAAACAIAAA==";
    assert!(good.contains(OLD), "meshio.vtu's first header changed");
    let bytes: Vec<u8> = header.iter().flat_map(|v| v.to_le_bytes()).collect();
    good.replacen(OLD, &base64(&bytes), 1).into_bytes()
}

fn base64(b: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut s = String::new();
    for c in b.chunks(3) {
        let n = c
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &x)| n | u32::from(x) << (16 - 8 * i));
        for k in 0..4 {
            if k <= c.len() {
                s.push(A[(n >> (18 - 6 * k) & 63) as usize] as char);
            } else {
                s.push('=');
            }
        }
    }
    s
}

#[test]
fn vtk_files_survive_corruption() {
    let good = String::from_utf8(data("meshio_ascii.vtk")).unwrap();
    let r = check_reader("vtk", &text_cases(&good, 300, 60), |p| {
        vtk::read_vtk(p, None)
    });
    report("meshio_ascii.vtk", &r);
    // Legacy binary (big-endian): the ASCII counts, and the first values of each array.
    let good = data("meshio_binary.vtk");
    let offsets: Vec<usize> = [
        ("POINTS 93 double\n", 0),
        ("OFFSETS vtktypeint64\n", 0),
        ("CONNECTIVITY vtktypeint64\n", 0),
        ("CELL_TYPES 255\n", 0),
        ("gmsh:physical 1 255 vtktypeint64\n", 0),
    ]
    .iter()
    .map(|(m, k)| after(&good, m, *k))
    .collect();
    let mut cases = binary_cases(&good, 300, &offsets);
    cases.extend(counts(&good, "POINTS ", "93 "));
    cases.extend(counts(&good, "CELLS ", "256 "));
    cases.extend(counts(&good, "CELLS 256 ", "1020\n"));
    cases.extend(counts(&good, "CELL_TYPES ", "255\n"));
    cases.extend(counts(&good, "CELL_DATA ", "255\n"));
    let r = check_reader("vtk", &cases, |p| vtk::read_vtk(p, None));
    report("meshio_binary.vtk", &r);
    // XML, zlib-compressed base64 arrays: the text's numbers, and block headers claiming
    // extreme sizes.
    let good = String::from_utf8(data("meshio.vtu")).unwrap();
    let mut cases = text_cases(&good, 300, 40);
    for (label, h) in [
        ("0 blocks", [0, 32768, 2232, 520]),
        ("last block 2^32-1", [1, 32768, u32::MAX, 520]),
        ("2^32-1 blocks", [u32::MAX, 32768, 2232, 520]),
        ("1000 blocks", [1000, 32768, 2232, 520]),
        ("2 blocks of 2^32-1", [2, u32::MAX, 2232, 520]),
        ("block size 0", [2, 0, 2232, 520]),
        ("compressed size 2^32-1", [1, 32768, 2232, u32::MAX]),
        ("compressed size 0", [1, 32768, 2232, 0]),
    ] {
        cases.push(Case::new(
            format!("header: {label}"),
            vtu_with_header(&good, h),
        ));
    }
    let r = check_reader("vtu", &cases, |p| vtk::read_vtk(p, None));
    report_no_short_read("meshio.vtu", &r, good.as_bytes());
}

#[test]
fn simulation_json_survives_corruption() {
    let r = check_reader(
        "json",
        &text_cases(SIM_JSON, 300, 40),
        Simulation::from_json,
    );
    report_no_short_read("simulation .json", &r, SIM_JSON.as_bytes());
}

// Regression tests, one per item of issue 20.

fn write(dir: &Path, name: &str, text: impl AsRef<[u8]>) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// `printf '18446744073709551615\n1\n' > p.mesh; biogpu mc mesh p.mesh` panicked with
/// `capacity overflow`; the tetrahedron count likewise.
#[test]
fn timos_count_of_u64_max_is_an_error() {
    let dir = scratch("u64max");
    let p = write(&dir, "p.mesh", "18446744073709551615\n1\n");
    let e = montecarlo_core::io::read_mesh(&p, None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("p.mesh") && e.contains("line 1"), "{e}");
    assert!(e.contains("node count") && e.contains("limit"), "{e}");
    let p = write(
        &dir,
        "t.mesh",
        "4\n18446744073709551615\n0 0 0\n1 0 0\n0 1 0\n0 0 1\n",
    );
    let e = timos::read_mesh(&p).unwrap_err().to_string();
    assert!(
        e.contains("tetrahedron count") && e.contains("line 2"),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// The `.opt` region count: directly and through a simulation file (`biogpu mc run`).
#[test]
fn opt_region_count_of_u64_max_is_an_error() {
    let dir = scratch("optmax");
    let opt = write(
        &dir,
        "p.opt",
        "1\n18446744073709551615\n0.1 10 0.9 1.4\n1\n1.0\n",
    );
    let e = timos::read_opt(&opt).unwrap_err().to_string();
    assert!(
        e.contains("p.opt") && e.contains("region count") && e.contains("line 2"),
        "{e}"
    );
    let sim = SIM_JSON.replace(
        r#"[{"mua": 0.1, "mus": 1.0, "g": 0.9, "n": 1.37}]"#,
        r#"{"timos": "p.opt"}"#,
    );
    let json = write(&dir, "sim.json", sim);
    let e = Simulation::from_json(&json).unwrap_err().to_string();
    assert!(e.contains("sim.json") && e.contains("materials"), "{e}");
    assert!(e.contains("p.opt") && e.contains("region count"), "{e}");
    std::fs::remove_dir_all(&dir).ok();
}

/// A count of 1e12 asked for 24 TB from a few bytes: refused before anything is reserved
/// (the binary's 2 GiB heap cap would abort otherwise).
#[test]
fn count_of_1e12_in_a_tiny_file_is_refused() {
    let dir = scratch("1e12");
    // Above the node cap (2^32 - 1): refused by the cap.
    let p = write(&dir, "big.mesh", "1000000000000\n1\n");
    let e = timos::read_mesh(&p).unwrap_err().to_string();
    assert!(
        e.contains("big.mesh") && e.contains("node count 1000000000000"),
        "{e}"
    );
    assert!(e.contains("limit"), "{e}");
    // Below the cap (1e9 nodes, 24 GB) in 11 bytes: nothing is reserved that the bytes present
    // cannot fill (the 2 GiB heap cap of this binary would abort), and the error says what
    // the header announced.
    let p = write(&dir, "short.mesh", "1000000000\n");
    assert_eq!(std::fs::metadata(&p).unwrap().len(), 11);
    let e = timos::read_mesh(&p).unwrap_err().to_string();
    assert!(
        e.contains("short.mesh") && e.contains("tetrahedron count"),
        "{e}"
    );
    let p = write(&dir, "short.mesh", "1000000000\n1\n0 0 0\n");
    let e = timos::read_mesh(&p).unwrap_err().to_string();
    assert!(e.contains("short.mesh") && e.contains("node 2"), "{e}");
    assert!(e.contains("announce 1000000000 nodes"), "{e}");
    // MMC: `1 1e12`, 7 bytes; and 1e9 rows, below the cap.
    let node = write(&dir, "node_x.dat", "1 1e12\n");
    assert_eq!(std::fs::metadata(&node).unwrap().len(), 7);
    let elem = write(&dir, "elem_x.dat", "1 1\n1 1 2 3 4 1\n");
    let e = mmc::read_mmc_mesh(&node, &elem).unwrap_err().to_string();
    assert!(
        e.contains("node_x.dat") && e.contains("node count 1000000000000"),
        "{e}"
    );
    let node = write(&dir, "node_y.dat", "1 1e9\n1 0 0 0\n");
    let e = mmc::read_mmc_mesh(&node, &elem).unwrap_err().to_string();
    assert!(
        e.contains("node_y.dat") && e.contains("says 1000000000 rows"),
        "{e}"
    );
    // The other TIM-OS files.
    let p = write(&dir, "big.source", "1000000000000\n1 0 0 0 10\n");
    let e = timos::read_source(&p).unwrap_err().to_string();
    assert!(
        e.contains("big.source") && e.contains("source count"),
        "{e}"
    );
    let p = write(
        &dir,
        "big.opt",
        "1\n1000000000000\n0.1 10 0.9 1.4\n1\n1.0\n",
    );
    let e = timos::read_opt(&p).unwrap_err().to_string();
    assert!(e.contains("big.opt") && e.contains("region count"), "{e}");
    std::fs::remove_dir_all(&dir).ok();
}

/// Header and data must agree: fewer tetrahedra announced than listed (the rest used to be
/// dropped silently) and more announced than listed.
#[test]
fn tet_counts_that_disagree_with_the_data_are_errors() {
    let dir = scratch("disagree");
    let m = small_mesh();
    let good = timos_mesh(&m);
    let p = write(&dir, "good.mesh", &good);
    assert_eq!(timos::read_mesh(&p).unwrap().len(), 40);
    let fewer = good.replacen("\n40\n", "\n39\n", 1);
    let p = write(&dir, "fewer.mesh", &fewer);
    let e = timos::read_mesh(&p).unwrap_err().to_string();
    assert!(
        e.contains("fewer.mesh") && e.contains("39 tetrahedra announced"),
        "{e}"
    );
    assert!(e.contains("header and data must agree"), "{e}");
    let more = good.replacen("\n40\n", "\n41\n", 1);
    let p = write(&dir, "more.mesh", &more);
    let e = timos::read_mesh(&p).unwrap_err().to_string();
    assert!(
        e.contains("more.mesh") && e.contains("tetrahedron 41"),
        "{e}"
    );
    // MMC element files, both ways.
    let node = write(&dir, "node_m.dat", mmc_node(&m));
    let elem = mmc_elem(&m);
    let fewer = write(
        &dir,
        "elem_fewer.dat",
        elem.replacen("1\t40\n", "1\t39\n", 1),
    );
    let e = mmc::read_mmc_mesh(&node, &fewer).unwrap_err().to_string();
    assert!(
        e.contains("elem_fewer.dat") && e.contains("says 39 rows"),
        "{e}"
    );
    let more = write(
        &dir,
        "elem_more.dat",
        elem.replacen("1\t40\n", "1\t41\n", 1),
    );
    let e = mmc::read_mmc_mesh(&node, &more).unwrap_err().to_string();
    assert!(e.contains("elem_more.dat") && e.contains("41"), "{e}");
    // The .opt and .source files: one record more than announced.
    let p = write(&dir, "more.opt", OPT.replacen("1\n2\n", "1\n1\n", 1));
    let e = timos::read_opt(&p).unwrap_err().to_string();
    assert!(
        e.contains("more.opt") && e.contains("announces 1 regions"),
        "{e}"
    );
    let p = write(&dir, "more.source", SOURCE.replacen("2\n", "1\n", 1));
    let e = timos::read_source(&p).unwrap_err().to_string();
    assert!(
        e.contains("more.source") && e.contains("1 sources announced"),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// `n_outside` with materials from a `.opt` file was ignored; it now overrides the file's
/// outside index (and the file's value is used when it is not given).
#[test]
fn n_outside_with_an_opt_file_is_honoured() {
    let dir = scratch("nout");
    write(&dir, "m.opt", "1\n1\n0.1 10 0.9 1.4\n1\n1.33\n");
    let base = SIM_JSON.replace(
        r#"[{"mua": 0.1, "mus": 1.0, "g": 0.9, "n": 1.37}]"#,
        r#"{"timos": "m.opt"}"#,
    );
    let json = write(
        &dir,
        "with.json",
        base.replace(r#""n_outside": 1.0"#, r#""n_outside": 1.5"#),
    );
    let sim = Simulation::from_json(&json).unwrap();
    assert_eq!(
        sim.optics.n_outside, 1.5,
        "the simulation file's n_outside wins"
    );
    assert_eq!(sim.optics.materials[0].n, 1.4);
    let json = write(
        &dir,
        "without.json",
        base.replace(r#""n_outside": 1.0,"#, ""),
    );
    let sim = Simulation::from_json(&json).unwrap();
    assert_eq!(
        sim.optics.n_outside, 1.33,
        "the .opt file's index without n_outside"
    );
    // An unphysical override is refused like any other n_outside.
    let json = write(
        &dir,
        "bad.json",
        base.replace(r#""n_outside": 1.0"#, r#""n_outside": 0.5"#),
    );
    let e = Simulation::from_json(&json).unwrap_err().to_string();
    assert!(
        e.contains("bad.json") && e.contains("n_outside") && e.contains("0.5"),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// `{"mesh": {"box": {..., "cell": 1e-4}}}` asked for petabytes; now a clear error.
#[test]
fn generated_meshes_above_the_cap_are_clear_errors() {
    let dir = scratch("cap");
    let json = SIM_JSON.replace(r#""cell": 2"#, r#""cell": 1e-4"#);
    let p = write(&dir, "fine.json", json);
    let e = Simulation::from_json(&p).unwrap_err().to_string();
    assert!(e.contains("fine.json") && e.contains("mesh"), "{e}");
    assert!(e.contains("cell 0.0001") && e.contains("tetrahedra"), "{e}");
    assert!(
        e.contains("MAX_GENERATED_TETS") && e.contains("50000000"),
        "{e}"
    );
    let json = SIM_JSON.replace(
        r#"{"box": {"origin": [0, 0, 0], "size": [4, 4, 4], "cell": 2, "tets_per_cell": 5}}"#,
        r#"{"slab": {"width": 4, "layers": [1, 2], "lateral_cells": 18446744073709551615}}"#,
    );
    let p = write(&dir, "slab.json", json);
    let e = Simulation::from_json(&p).unwrap_err().to_string();
    assert!(
        e.contains("slab.json") && e.contains("MAX_GENERATED_TETS"),
        "{e}"
    );
    let e = generate::box_mesh([0.0; 3], [1.0; 3], 1e-300, 5)
        .unwrap_err()
        .to_string();
    assert!(e.contains("above the cap"), "{e}");
    // The cap itself: 50 million, and a box just under it is accepted by the check.
    assert_eq!(generate::MAX_GENERATED_TETS, 50_000_000);
    std::fs::remove_dir_all(&dir).ok();
}

/// Out-of-range values in text files: named by file, line and field.
#[test]
fn unphysical_values_are_named() {
    let dir = scratch("values");
    let good = timos_mesh(&small_mesh());
    let p = write(
        &dir,
        "nan.mesh",
        good.replacen("\n0 0 0\n", "\n0 NaN 0\n", 1),
    );
    let e = timos::read_mesh(&p).unwrap_err().to_string();
    assert!(
        e.contains("nan.mesh") && e.contains("line 3") && e.contains("node 1"),
        "{e}"
    );
    // Line 30 holds the first tetrahedron (27 nodes on lines 3-29).
    let first = good.lines().nth(29).unwrap().to_string();
    let p = write(&dir, "idx.mesh", good.replacen(&first, "1 2 3 99 1", 1));
    let e = timos::read_mesh(&p).unwrap_err().to_string();
    assert!(
        e.contains("idx.mesh") && e.contains("node 99") && e.contains("line 30"),
        "{e}"
    );
    // A zero-volume tetrahedron: the first one's fourth node moved onto its first.
    let v: Vec<&str> = first.split(' ').collect();
    let flat = format!("{} {} {} {} {}", v[0], v[1], v[2], v[0], v[4]);
    let p = write(&dir, "flat.mesh", good.replacen(&first, &flat, 1));
    let e = timos::read_mesh(&p).unwrap_err().to_string();
    assert!(
        e.contains("flat.mesh") && e.contains("line 30") && e.contains("zero volume"),
        "{e}"
    );
    for (text, field) in [
        ("1\n1\n-0.1 10 0.9 1.4\n1\n1.0\n", "mua"),
        ("1\n1\n0.1 inf 0.9 1.4\n1\n1.0\n", "mus"),
        ("1\n1\n0.1 10 1.5 1.4\n1\n1.0\n", "g = 1.5"),
        ("1\n1\n0.1 10 0.9 NaN\n1\n1.0\n", "n = NaN"),
        (
            "1\n1\n0.1 10 0.9 1.4\n1\n0.5\n",
            "outside refractive index 0.5",
        ),
    ] {
        let p = write(&dir, "bad.opt", text);
        let e = timos::read_opt(&p).unwrap_err().to_string();
        assert!(
            e.contains("bad.opt") && e.contains("line") && e.contains(field),
            "{e}"
        );
    }
    let p = write(&dir, "bad.source", "1\n11 3 1 1 0 0 0 0 100\n");
    let e = timos::read_source(&p).unwrap_err().to_string();
    assert!(e.contains("bad.source") && e.contains("direction"), "{e}");
    // MMC's JSON input: checked before its mesh files are read.
    let mmc = r#"{"Domain": {"MeshID": "none", "Media": [{"mua": 0, "mus": 0, "g": 1, "n": 1},
        {"mua": 0.1, "mus": 1, "g": 0.9, "n": 1.37}]}, "Session": {"Photons": 100},
        "Forward": {"T1": 5e-9}, "Optode": {"Source": {"Pos": [1, 1, 0]}}}"#;
    for (from, to, field) in [
        (r#""g": 0.9"#, r#""g": 1.5"#, "Domain.Media[1]"),
        (r#""n": 1}"#, r#""n": 0.5}"#, "Domain.Media[0].n"),
        (
            r#""Photons": 100"#,
            r#""Photons": 1e300"#,
            "Session.Photons",
        ),
        (r#""T1": 5e-9"#, r#""T1": -1"#, "Forward.T1"),
        (r#""Pos": [1, 1, 0]"#, r#""Pos": [1, 1e999, 0]"#, "sim.json"),
    ] {
        assert!(mmc.contains(from), "{from}");
        let p = write(&dir, "sim.json", mmc.replace(from, to));
        let e = Simulation::from_json(&p).unwrap_err().to_string();
        assert!(e.contains("sim.json") && e.contains(field), "{e}");
    }
    let p = write(
        &dir,
        "bad2.source",
        "2\n1 0 0 0 18446744073709551615\n1 0 0 0 1\n",
    );
    let e = timos::read_source(&p).unwrap_err().to_string();
    assert!(
        e.contains("bad2.source") && e.contains("photon counts"),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// A compressed `.vtu` block header claiming 4 GiB is refused before vtkio allocates it, and
/// a header vtkio panics on becomes an error naming the file.
#[test]
fn vtu_block_headers_are_checked_and_vtkio_panics_contained() {
    let dir = scratch("vtu");
    let good = String::from_utf8(data("meshio.vtu")).unwrap();
    let p = write(
        &dir,
        "huge.vtu",
        vtu_with_header(&good, [1, 32768, u32::MAX, 520]),
    );
    let e = vtk::read_vtk(&p, None).unwrap_err().to_string();
    assert!(e.contains("huge.vtu") && e.contains("data array 1"), "{e}");
    assert!(
        e.contains("compressed block header") && e.contains("4294967295"),
        "{e}"
    );
    let p = write(
        &dir,
        "zero.vtu",
        vtu_with_header(&good, [0, 32768, 2232, 520]),
    );
    let e = vtk::read_vtk(&p, None).unwrap_err().to_string();
    assert!(e.contains("zero.vtu") && e.contains("0 blocks"), "{e}");
    // 1000 blocks: the header runs past the array's data, where vtkio slices out of range.
    let p = write(
        &dir,
        "panic.vtu",
        vtu_with_header(&good, [1000, 32768, 2232, 520]),
    );
    let e = vtk::read_vtk(&p, None).unwrap_err().to_string();
    assert!(e.contains("panic.vtu") && e.contains("VTK"), "{e}");
    std::fs::remove_dir_all(&dir).ok();
}

/// Findings of `fuzz/` (libFuzzer), kept as regression inputs: each must be refused with an
/// error naming the file, not a panic or an abort.
#[test]
fn fuzz_findings_are_clear_errors() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/fuzz");
    let mut names: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    names.sort();
    assert!(!names.is_empty());
    for path in names {
        let ext = path.extension().unwrap().to_str().unwrap().to_string();
        let cases = [Case::new(
            path.display().to_string(),
            std::fs::read(&path).unwrap(),
        )];
        let r = bad_input::check_reader(&ext, &cases, |p| montecarlo_core::io::read_mesh(p, None));
        report(&path.display().to_string(), &r);
        r.assert_clean();
        assert_eq!(
            r.errors(),
            1,
            "{}: a fuzz finding must not read",
            path.display()
        );
    }
}
