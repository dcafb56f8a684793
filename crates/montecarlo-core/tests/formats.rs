//! Mesh file formats: Gmsh 2.2/4.1 (ASCII and binary) and VTK (legacy ASCII/binary, XML)
//! round trips, hand-written files, and truncated or corrupt input (a clear error naming the
//! file and the line, byte or element; never a panic).

use montecarlo_core::Mesh;
use montecarlo_core::io::{gmsh, vtk};
use montecarlo_core::sim::generate;
use std::path::{Path, PathBuf};

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("mc-formats-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Two regions (slab layers), so region tags must survive.
fn two_region_mesh() -> Mesh {
    generate::slab_mesh(4.0, &[1.0, 2.0], 2, 1, 5).unwrap()
}

fn same_mesh(a: &Mesh, b: &Mesh) {
    assert_eq!(a.len(), b.len());
    assert_eq!(a.nodes.len(), b.nodes.len());
    for (p, q) in a.nodes.iter().zip(&b.nodes) {
        for k in 0..3 {
            assert!(
                (p[k] - q[k]).abs() <= 1e-12 * (1.0 + p[k].abs()),
                "{p:?} {q:?}"
            );
        }
    }
    // Same numbering, orientation and regions.
    assert_eq!(a.tets, b.tets);
    assert_eq!(a.regions, b.regions);
    assert_eq!(a.neighbours, b.neighbours);
}

#[test]
fn gmsh_round_trips_in_all_four_encodings() {
    let dir = scratch("gmsh-rt");
    let m = two_region_mesh();
    for v4 in [false, true] {
        for binary in [false, true] {
            let p = dir.join(format!("m-{v4}-{binary}.msh"));
            gmsh::write_gmsh(&p, &m, v4, binary).unwrap();
            let back = gmsh::read_gmsh(&p).unwrap_or_else(|e| panic!("v4 {v4} bin {binary}: {e}"));
            same_mesh(&m, &back.mesh);
            assert_eq!(back.ignored, 0);
            // Every strict prefix is a clear error, never a panic or a smaller mesh.
            let bytes = std::fs::read(&p).unwrap();
            let cut = dir.join("cut.msh");
            let step = (bytes.len() / 97).max(1);
            for len in (0..bytes.len() - 1).step_by(step) {
                std::fs::write(&cut, &bytes[..len]).unwrap();
                match gmsh::read_gmsh(&cut) {
                    Err(e) => assert!(e.to_string().contains("cut.msh"), "{e}"),
                    Ok(x) => panic!("prefix of {len} bytes read as {} tets", x.mesh.len()),
                }
            }
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}

const V41: &str = "$MeshFormat
4.1 0 8
$EndMeshFormat
$PhysicalNames
1
3 5 \"tissue\"
$EndPhysicalNames
$Entities
0 0 1 1
1 0 0 0 1 1 1 0 0
1 0 0 -1 1 1 1 1 5 1 1
$EndEntities
$Nodes
2 5 10 50
2 1 0 2
10
20
0 0 0
1 0 0
3 1 0 3
30
40
50
0 1 0
0 0 1
0.3 0.3 -1
$EndNodes
$Elements
2 3 1 3
2 1 2 1
1 10 20 30
3 1 4 2
2 10 20 30 40
3 10 30 20 50
$EndElements
";

#[test]
fn gmsh_41_hand_written_with_entities_sparse_tags_and_triangles() {
    let dir = scratch("gmsh41");
    let p = dir.join("two.msh");
    std::fs::write(&p, V41).unwrap();
    let m = gmsh::read_gmsh(&p).unwrap();
    assert_eq!(m.mesh.len(), 2);
    // Region = the volume's physical tag, not its entity tag.
    assert_eq!(&m.mesh.regions[1..], &[5, 5]);
    assert_eq!(m.ignored, 1);
    assert!(m.notes[0].contains("triangle"), "{:?}", m.notes);
    // The two tets share their face (interior), so 6 boundary triangles.
    assert_eq!(m.mesh.boundary.len(), 6);
    // An element naming a node tag that does not exist.
    std::fs::write(&p, V41.replace("3 10 30 20 50", "3 10 30 20 51")).unwrap();
    let e = gmsh::read_gmsh(&p).unwrap_err().to_string();
    assert!(e.contains("node tag 51") && e.contains("element 3"), "{e}");
    // A malformed tetrahedron line names the line.
    std::fs::write(&p, V41.replace("2 10 20 30 40", "2 10 20 30")).unwrap();
    let e = gmsh::read_gmsh(&p).unwrap_err().to_string();
    assert!(e.contains("two.msh") && e.contains("line 33"), "{e}");
    // MSH 4.0 is refused with advice.
    std::fs::write(&p, V41.replace("4.1 0 8", "4 0 8")).unwrap();
    let e = gmsh::read_gmsh(&p).unwrap_err().to_string();
    assert!(e.contains("msh41"), "{e}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn gmsh_22_uses_the_elementary_tag_when_there_is_no_physical_one() {
    let dir = scratch("gmsh22");
    let p = dir.join("t.msh");
    let text = "$MeshFormat\n2.2 0 8\n$EndMeshFormat\n$Comments\nanything\n$EndComments\n\
        $Nodes\n4\n1 0 0 0\n2 1 0 0\n3 0 1 0\n4 0 0 1\n$EndNodes\n\
        $Elements\n3\n1 15 2 0 1 1\n2 2 2 0 1 1 2 3\n3 4 2 0 3 1 2 3 4\n$EndElements\n";
    std::fs::write(&p, text).unwrap();
    let m = gmsh::read_gmsh(&p).unwrap();
    assert_eq!(m.mesh.regions[1], 3);
    assert_eq!(m.ignored, 2);
    // Zero-volume tetrahedron: named.
    std::fs::write(&p, text.replace("4 0 0 1\n$End", "4 1 1 0\n$End")).unwrap();
    let e = gmsh::read_gmsh(&p).unwrap_err().to_string();
    assert!(
        e.contains("tetrahedron 1") && e.contains("zero volume"),
        "{e}"
    );
    // Only surface elements: an error that lists what was found.
    std::fs::write(
        &p,
        text.replace("3\n1 15", "2\n1 15")
            .replace("3 4 2 0 3 1 2 3 4\n", ""),
    )
    .unwrap();
    let e = gmsh::read_gmsh(&p).unwrap_err().to_string();
    assert!(
        e.contains("no 4-node tetrahedra") && e.contains("triangle"),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

fn read_back(p: &Path) -> Mesh {
    vtk::read_vtk(p, None)
        .unwrap_or_else(|e| panic!("{e}"))
        .mesh
}

#[test]
fn vtk_round_trips_xml_legacy_ascii_and_legacy_binary() {
    let dir = scratch("vtk-rt");
    let m = two_region_mesh();
    let data = vec![0.5; m.len()];
    let vtu = dir.join("m.vtu");
    vtk::write_vtu(&vtu, &m, &[("fluence", &data)]).unwrap();
    same_mesh(&m, &read_back(&vtu));
    let legacy = dir.join("m.vtk");
    vtk::write_vtk(&legacy, &m, &[("fluence", &data)]).unwrap();
    same_mesh(&m, &read_back(&legacy));
    // Legacy binary (big-endian, as the format prescribes), written by vtkio.
    let mut v = vtkio::Vtk::import(&vtu).unwrap();
    v.version = vtkio::model::Version::new_legacy(4, 2);
    v.title = "biogpu test".into();
    let bin = dir.join("bin.vtk");
    v.export_be(&bin).unwrap();
    assert!(!std::fs::read(&bin).unwrap().is_ascii(), "not binary");
    same_mesh(&m, &read_back(&bin));
    // A named region array that is missing is an error listing the arrays present.
    let e = vtk::read_vtk(&vtu, Some("tissue")).unwrap_err().to_string();
    assert!(e.contains("tissue") && e.contains("region"), "{e}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn vtk_bad_input_names_the_cell_and_never_panics() {
    let dir = scratch("vtk-bad");
    let p = dir.join("bad.vtk");
    let good = "# vtk DataFile Version 3.0\nt\nASCII\nDATASET UNSTRUCTURED_GRID\nPOINTS 5 double\n\
        0 0 0\n1 0 0\n0 1 0\n0 0 1\n1 1 1\nCELLS 2 9\n4 0 1 2 3\n3 1 2 4\nCELL_TYPES 2\n10\n5\n\
        CELL_DATA 2\nSCALARS Material int 1\nLOOKUP_TABLE default\n2\n7\n";
    std::fs::write(&p, good).unwrap();
    let m = vtk::read_vtk(&p, None).unwrap();
    assert_eq!(m.mesh.len(), 1);
    assert_eq!(m.mesh.regions[1], 2);
    assert_eq!(m.ignored, 1);
    // Region 0 on a tetrahedron: named by cell.
    std::fs::write(&p, good.replace("default\n2\n", "default\n0\n")).unwrap();
    let e = vtk::read_vtk(&p, None).unwrap_err().to_string();
    assert!(e.contains("cell 0") && e.contains("region 0"), "{e}");
    // A node index past the points.
    std::fs::write(&p, good.replace("4 0 1 2 3", "4 0 1 2 9")).unwrap();
    let e = vtk::read_vtk(&p, None).unwrap_err().to_string();
    assert!(e.contains("cell 0") && e.contains("point 9"), "{e}");
    // Every prefix: an error naming the file, or a mesh where the cut leaves a complete file
    // (e.g. without the optional cell data), and never a panic.
    let bytes = good.as_bytes();
    for len in 0..bytes.len() - 2 {
        std::fs::write(&p, &bytes[..len]).unwrap();
        // A panic here fails the test.
        if let Err(e) = vtk::read_vtk(&p, None) {
            assert!(e.to_string().contains("bad.vtk"), "{len} bytes: {e}");
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// A simulation file naming a Gmsh and a VTK mesh (relative paths) runs, and the reader's
/// notes reach the simulation.
#[test]
fn simulation_files_read_gmsh_and_vtk_meshes() {
    let dir = scratch("simfile");
    std::fs::write(dir.join("two.msh"), V41).unwrap();
    let m = two_region_mesh();
    vtk::write_vtu(&dir.join("m.vtu"), &m, &[]).unwrap();
    let mut spec = serde_json::to_value(montecarlo_core::SimSpec::example()).unwrap();
    spec["photons"] = 200.into();
    spec["materials"] = serde_json::json!([
        {"mua": 0.1, "mus": 1.0, "g": 0.0, "n": 1.0},
        {"mua": 0.1, "mus": 1.0, "g": 0.0, "n": 1.0},
        {"mua": 0.1, "mus": 1.0, "g": 0.0, "n": 1.0},
        {"mua": 0.1, "mus": 1.0, "g": 0.0, "n": 1.0},
        {"mua": 0.1, "mus": 1.0, "g": 0.0, "n": 1.0}
    ]);
    spec["sources"] = serde_json::json!([{"type": "volume", "region": 5}]);
    spec["mesh"] = serde_json::json!({"gmsh": "two.msh"});
    let p = dir.join("sim.json");
    std::fs::write(&p, spec.to_string()).unwrap();
    let sim = montecarlo_core::Simulation::from_json(&p).unwrap();
    assert_eq!(sim.mesh.len(), 2);
    assert!(sim.notes[0].contains("ignored 1"), "{:?}", sim.notes);
    assert!(sim.run_cpu(0, 200).summary.balance_error.abs() < 1e-12);
    spec["mesh"] = serde_json::json!({"vtk": {"path": "m.vtu", "region": "region"}});
    spec["sources"] = serde_json::json!([{"type": "surface", "region": 2}]);
    std::fs::write(&p, spec.to_string()).unwrap();
    let sim = montecarlo_core::Simulation::from_json(&p).unwrap();
    assert_eq!(sim.mesh.len(), m.len());
    assert!(sim.run_cpu(0, 200).summary.balance_error.abs() < 1e-12);
    spec["mesh"] = serde_json::json!({"vtk": {"path": "m.vtu", "region": "nope"}});
    std::fs::write(&p, spec.to_string()).unwrap();
    let e = montecarlo_core::Simulation::from_json(&p)
        .unwrap_err()
        .to_string();
    assert!(e.contains("m.vtu") && e.contains("nope"), "{e}");
    std::fs::remove_dir_all(&dir).ok();
}

/// Files written by Gmsh 4.15.2 itself (2.2 and 4.1, ASCII and binary) and by meshio 5.3.5
/// (.vtu, legacy VTK 5.1 ASCII and binary with `vtktypeint64` names), all of the same
/// two-volume box (tests/data/README.md): the same 255 tetrahedra, regions 11 (z < 4,
/// 400 mm^3) and 12 (600 mm^3), and Gmsh's 12 surface triangles ignored.
#[test]
fn real_gmsh_and_meshio_files_read_alike() {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    for name in [
        "gmsh_22_ascii.msh",
        "gmsh_22_bin.msh",
        "gmsh_41_ascii.msh",
        "gmsh_41_bin.msh",
        "meshio.vtu",
        "meshio_ascii.vtk",
        "meshio_binary.vtk",
    ] {
        let p = data.join(name);
        let is_gmsh = name.starts_with("gmsh_");
        let m = if is_gmsh {
            gmsh::read_gmsh(&p)
        } else {
            vtk::read_vtk(&p, None)
        }
        .unwrap_or_else(|e| panic!("{e}"));
        let mesh = &m.mesh;
        assert_eq!(mesh.len(), 255, "{name}");
        assert_eq!(m.ignored, if is_gmsh { 12 } else { 0 }, "{name}");
        let vol = |r: u32| -> f64 {
            (1..=mesh.len())
                .filter(|&t| mesh.regions[t] == r)
                .map(|t| mesh.volumes[t])
                .sum()
        };
        assert!((vol(11) - 400.0).abs() < 1e-9, "{name}: {}", vol(11));
        assert!((vol(12) - 600.0).abs() < 1e-9, "{name}: {}", vol(12));
        let area: f64 = mesh.boundary_area.iter().sum();
        assert!((area - 600.0).abs() < 1e-9, "{name}: boundary {area}");
    }
}
