//! `biogpu perfusion t1map`: variable-flip-angle (DESPOT1) T1 maps from spoiled gradient echo
//! images (`perfusion_core::t1`), for `biogpu perfusion fit --t1-map`.

use super::output::OutDir;
use anyhow::{Context, bail, ensure};
use ndarray::{Array3, Array4, Axis};
use perfusion_core::io::{nifti as pnii, png as ppng};
use perfusion_core::t1::{T1Maps, T1Status, Vfa};
use perfusion_core::{finite_median, io::nifti::NiftiHeader};
use std::path::{Path, PathBuf};
use std::time::Instant;

#[derive(Debug, clap::Args)]
pub struct T1mapArgs {
    /// VFA images: one 3-D NIfTI per flip angle, comma-separated in the order of
    /// --flip-angles, or one 4-D NIfTI with the angles along its 4th axis.
    #[arg(long, value_delimiter = ',', required = true)]
    vfa: Vec<PathBuf>,
    /// Nominal flip angles (degrees), one per image, e.g. 2,5,10,15.
    #[arg(long, value_delimiter = ',', required = true)]
    flip_angles: Vec<f64>,
    /// Repetition time (s), e.g. 0.0045.
    #[arg(long)]
    tr: f64,
    /// B1 map (3-D, the images' grid): actual / nominal flip angle per voxel, > 0 inside
    /// the mask.
    #[arg(long)]
    b1: Option<PathBuf>,
    /// Voxels to fit (non-zero); default: every voxel.
    #[arg(long)]
    mask: Option<PathBuf>,
    /// T1 range (s) LOWER:UPPER; fitted T1 outside it gets status out-of-range.
    #[arg(long, default_value = "0.01:10")]
    t1_range: String,
    /// Slice (z) for the PNG of T1; default: the middle one.
    #[arg(long)]
    slice: Option<usize>,
    /// Output folder.
    #[arg(long, default_value = "t1map-out")]
    out: PathBuf,
    /// Overwrite existing outputs.
    #[arg(long)]
    force: bool,
}

/// The VFA images as one `(x, y, z, angle)` series, with the first file's header.
fn read_vfa(files: &[PathBuf], angles: usize) -> anyhow::Result<(Array4<f32>, NiftiHeader)> {
    if let [file] = files {
        let series = pnii::read_series(file)?;
        let n = series.data.dim().3;
        ensure!(
            n == angles,
            "--vfa {}: {n} volume(s) along its 4th axis, but --flip-angles gives {angles} angles; \
             give one angle per volume",
            file.display()
        );
        return Ok((series.data, series.header));
    }
    ensure!(
        files.len() == angles,
        "--vfa gives {} images, but --flip-angles gives {angles} angles; give one angle per image",
        files.len()
    );
    let (first, header) = pnii::read_volume(&files[0])?;
    let mut data = Array4::<f32>::zeros((first.dim().0, first.dim().1, first.dim().2, angles));
    data.index_axis_mut(Axis(3), 0).assign(&first);
    for (i, file) in files.iter().enumerate().skip(1) {
        let (vol, _) = pnii::read_volume(file)?;
        ensure!(
            vol.dim() == first.dim(),
            "--vfa {}: shape {:?}, but {} has {:?}; every image must be on one grid",
            file.display(),
            vol.shape(),
            files[0].display(),
            first.shape()
        );
        data.index_axis_mut(Axis(3), i).assign(&vol);
    }
    Ok((data, header))
}

/// A 3-D volume on the images' grid (`what`: the option's name).
fn read_on_grid(
    path: &Path,
    shape: (usize, usize, usize),
    what: &str,
) -> anyhow::Result<Array3<f32>> {
    let (vol, _) = pnii::read_volume(path)?;
    ensure!(
        vol.dim() == shape,
        "{what} {}: shape {:?}, but the VFA images are {:?}",
        path.display(),
        vol.shape(),
        [shape.0, shape.1, shape.2]
    );
    Ok(vol)
}

fn parse_range(text: &str) -> anyhow::Result<(f64, f64)> {
    let parsed = text
        .split_once(':')
        .and_then(|(lo, hi)| Some((lo.trim().parse().ok()?, hi.trim().parse().ok()?)));
    parsed
        .with_context(|| format!("--t1-range `{text}`: expected LOWER:UPPER seconds, e.g. 0.01:10"))
}

/// The B1 values of the fitted voxels, each checked finite and > 0 (the message names the
/// voxel).
fn b1_values(
    path: &Path,
    shape: (usize, usize, usize),
    index: &[[usize; 3]],
) -> anyhow::Result<Vec<f64>> {
    let map = read_on_grid(path, shape, "--b1")?;
    index
        .iter()
        .map(|&[x, y, z]| {
            let b = f64::from(map[[x, y, z]]);
            if b.is_finite() && b > 0.0 {
                Ok(b)
            } else {
                bail!(
                    "--b1 {}: {b} at voxel {x},{y},{z}; B1 (actual / nominal flip angle) must be \
                     finite and > 0 in every fitted voxel: give a --mask that leaves out voxels \
                     without B1",
                    path.display()
                )
            }
        })
        .collect()
}

/// Every file `t1map` writes, after checking `--slice`.
fn planned(z: usize, slices: usize) -> anyhow::Result<Vec<String>> {
    ensure!(z < slices, "--slice {z}: the images have {slices} slices");
    Ok(
        ["t1.nii.gz", "m0.nii.gz", "t1_status.nii.gz", "summary.json"]
            .into_iter()
            .map(String::from)
            .chain([format!("t1_z{z}.png")])
            .collect(),
    )
}

pub fn run(a: &T1mapArgs) -> anyhow::Result<()> {
    let vfa = Vfa {
        t1_range_s: parse_range(&a.t1_range)?,
        ..Vfa::new(&a.flip_angles, a.tr)?
    };
    vfa.validate()?;
    let (data, header) = read_vfa(&a.vfa, a.flip_angles.len())?;
    let (nx, ny, nz, _) = data.dim();
    let shape = (nx, ny, nz);
    let mask = match &a.mask {
        Some(p) => read_on_grid(p, shape, "--mask")?.mapv(|v| v != 0.0),
        None => Array3::from_elem(shape, true),
    };
    let (signals, index) = pnii::masked_curves(&data, &mask)?;
    ensure!(!index.is_empty(), "--mask selects no voxel");
    let b1 = match &a.b1 {
        Some(p) => Some(b1_values(p, shape, &index)?),
        None => None,
    };
    let z = a.slice.unwrap_or(nz / 2);
    let mut inputs: Vec<&Path> = a.vfa.iter().map(PathBuf::as_path).collect();
    inputs.extend(a.b1.iter().chain(&a.mask).map(PathBuf::as_path));
    let out = OutDir::create(&a.out, a.force, &inputs, planned(z, nz)?)?;
    let t0 = Instant::now();
    let maps = vfa.fit(signals.view(), b1.as_deref())?;
    let secs = t0.elapsed().as_secs_f64();
    let mean = data.mean_axis(Axis(3)).context("no VFA image")?;
    write_maps(&out, &maps, &index, shape, &header, &mean, z)?;
    let counts = maps.status_counts();
    out.write_json("summary.json", &summary(a, &vfa, &maps, secs))?;
    let shown = out.path().display().to_string();
    out.commit()?;
    crate::say!(
        "{} voxels in {secs:.3} s: {} ok, {} out of range, {} invalid input, {} failed; median T1 {} s",
        index.len(),
        counts[0],
        counts[1],
        counts[2],
        counts[3],
        finite_median(ok_values(&maps, &maps.t1_s)).map_or("-".into(), |m| format!("{m:.3}")),
    );
    crate::say!("outputs in {shown}");
    Ok(())
}

/// The values of `map` where the status is ok.
fn ok_values<'a>(
    maps: &'a T1Maps,
    map: &'a ndarray::Array1<f64>,
) -> impl Iterator<Item = f64> + 'a {
    map.iter()
        .zip(&maps.status)
        .filter(|(_, s)| **s == T1Status::Ok as u8)
        .map(|(v, _)| *v)
}

fn write_maps(
    out: &OutDir,
    maps: &T1Maps,
    index: &[[usize; 3]],
    shape: (usize, usize, usize),
    header: &NiftiHeader,
    mean: &Array3<f32>,
    z: usize,
) -> anyhow::Result<()> {
    let t1 = pnii::scatter(maps.t1_s.view(), index, shape);
    pnii::write_map(&out.file("t1.nii.gz")?, t1.view(), header)?;
    let m0 = pnii::scatter(maps.m0.view(), index, shape);
    pnii::write_map(&out.file("m0.nii.gz")?, m0.view(), header)?;
    let mut status = Array3::<u8>::from_elem(shape, 255);
    for (&s, &[x, y, zz]) in maps.status.iter().zip(index) {
        status[[x, y, zz]] = s;
    }
    pnii::write_map(&out.file("t1_status.nii.gz")?, status.view(), header)?;
    ppng::write_overlay(
        &out.file(&format!("t1_z{z}.png"))?,
        mean.index_axis(Axis(2), z),
        t1.index_axis(Axis(2), z),
        None,
    )?;
    Ok(())
}

fn summary(a: &T1mapArgs, vfa: &Vfa, maps: &T1Maps, secs: f64) -> serde_json::Value {
    let counts = maps.status_counts();
    serde_json::json!({
        "command": "perfusion t1map",
        "method": "linear DESPOT1, then Levenberg-Marquardt on the SPGR signal",
        "voxels": maps.status.len(),
        "seconds": secs,
        "flip_angles_deg": vfa.flip_angles_deg,
        "tr_s": vfa.tr_s,
        "t1_range_s": [vfa.t1_range_s.0, vfa.t1_range_s.1],
        "b1": a.b1.as_ref().map(|p| p.display().to_string()),
        "status": T1Status::ALL.iter().zip(counts).map(|(s, n)| (s.name().to_string(), serde_json::json!(n))).collect::<serde_json::Map<_, _>>(),
        "status_codes": T1Status::ALL.iter().map(|s| (s.name().to_string(), serde_json::json!(*s as u8))).collect::<serde_json::Map<_, _>>(),
        "median_ok": {
            "t1_s": finite_median(ok_values(maps, &maps.t1_s)),
            "m0": finite_median(ok_values(maps, &maps.m0)),
        },
        "units": { "t1": "s", "m0": "signal units of the images", "t1_status": "code; 255 outside the mask" },
    })
}
