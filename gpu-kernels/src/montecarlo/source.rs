//! Packet launch: pick a source by its cumulative share and sample a start point and
//! direction, mirroring montecarlo-core's `source::launch` draw for draw (same uniforms in
//! the same order, f32 instead of f64).
//!
//! A source is four float4 ([`super::SRC_FLOATS`] floats):
//! `[kind, cumulative share, param, aux offset]`, `[x, y, z, aux count]`,
//! `[dx, dy, dz, start weight]`, `[ux, uy, uz, Rsp]` with `u` a unit vector normal to `d`
//! (the host's `source::basis`) and `v = d x u`. A beam entering through the surface starts
//! with weight 1 - Rsp and banks Rsp (its specular reflection at launch) in
//! `totals[T_SPECULAR]`; every other source has weight 1 and Rsp 0. `param` is the cone's
//! cos(half angle), the disk's radius, the Gaussian's 1/e^2 waist or the line's length (`d`
//! is then the unit vector along the line). Disk and Gaussian positions are the centre
//! moved a hair along `d` (the host computes it in f64, as the CPU does). Volume and
//! surface sources keep their elements in `src_aux[offset .. offset + count]`,
//! [`super::AUX_VECS`] float4 each: `[alias probability, alias index (bits), tet (bits),
//! 0]`, the element's nodes (four for a tet, three for a triangle), then for a triangle the
//! inward normal and the basis vector `u`.
//! The element is drawn by Walker's alias method (index from one 32-bit draw, then one
//! uniform against the alias probability): the CPU's element probabilities, O(1).

use super::photon::{Photon, exit_face, pick, set_material};
use super::rng::{Rng, next_u32, uniform};
use super::transport::{Acc, bank, fixed};
use super::{
    AUX_VECS, KIND_CONE, KIND_DISK, KIND_GAUSSIAN, KIND_ISOTROPIC, KIND_LINE, KIND_SURFACE,
    KIND_VOLUME, T_SPECULAR,
};
use cubecl::prelude::*;

/// Walk from `(fx, fy, fz)` inside tetrahedron `t` straight to `(tx, ty, tz)`: the
/// tetrahedron holding the end point, or 0 when the segment leaves the mesh (or takes more
/// than `max_steps` tetrahedra). montecarlo-core's `Mesh::walk`.
#[cube]
#[allow(clippy::too_many_arguments)]
pub(crate) fn walk(
    faces: &Array<Vector<f32, Const<4>>>,
    neigh: &Array<Vector<i32, Const<4>>>,
    t0: u32,
    fx: f32,
    fy: f32,
    fz: f32,
    tx: f32,
    ty: f32,
    tz: f32,
    max_steps: u32,
) -> u32 {
    let ex = tx - fx;
    let ey = ty - fy;
    let ez = tz - fz;
    let len = f32::sqrt(ex * ex + ey * ey + ez * ez);
    let mut result = t0;
    if len > 0.0f32 {
        let ux = ex / len;
        let uy = ey / len;
        let uz = ez / len;
        let mut t = t0;
        let mut travelled = 0.0f32;
        let mut steps = 0u32;
        let mut going = true;
        result = 0u32;
        while going {
            let e = exit_face(
                faces,
                t,
                fx + travelled * ux,
                fy + travelled * uy,
                fz + travelled * uz,
                ux,
                uy,
                uz,
            );
            if travelled + e.h >= len {
                result = t;
                going = false;
            } else {
                travelled += e.h;
                let v = pick(neigh[t as usize], e.f);
                if v <= 0i32 {
                    going = false;
                } else {
                    t = (v & 0x1FFF_FFFFi32) as u32;
                }
            }
            steps += 1u32;
            if steps >= max_steps {
                going = false;
            }
        }
    }
    result
}

/// Start a packet: position, direction, tetrahedron, the source's start weight (1 - Rsp,
/// with Rsp banked in `acc.specular`), first optical depth, and the material of its
/// region. Returns false when the sampled start lies outside the mesh (the packet is then
/// counted as lost with its weight 1 and no specular share, as on the CPU).
#[cube]
#[allow(clippy::too_many_arguments)]
pub(crate) fn launch(
    p: &mut Photon,
    rng: &mut Rng,
    acc: &mut Acc,
    totals: &mut Array<Atomic<u32>>,
    srcs: &Array<Vector<f32, Const<4>>>,
    src_tet: &Array<u32>,
    src_aux: &Array<Vector<f32, Const<4>>>,
    faces: &Array<Vector<f32, Const<4>>>,
    neigh: &Array<Vector<i32, Const<4>>>,
    region: &Array<u32>,
    mats: &Array<Vector<f32, Const<4>>>,
    n_sources: u32,
    max_steps: u32,
) -> bool {
    let two_pi = 6.283_185_3f32;
    let pi = 3.141_592_7f32;
    let pick_u = uniform(rng);
    let mut k = n_sources - 1u32;
    let mut j = n_sources;
    while j > 0u32 {
        j -= 1u32;
        if pick_u <= srcs[(j * 4u32) as usize][1] {
            k = j;
        }
    }
    let b = (k * 4u32) as usize;
    let r0 = srcs[b];
    let r1 = srcs[b + 1];
    let r2 = srcs[b + 2];
    let r3 = srcs[b + 3];
    let kind = r0[0] as u32;
    let param = r0[2];
    p.px = r1[0];
    p.py = r1[1];
    p.pz = r1[2];
    p.dx = r2[0];
    p.dy = r2[1];
    p.dz = r2[2];
    let mut t = src_tet[k as usize];
    if kind == KIND_ISOTROPIC || kind == KIND_LINE {
        let mut along = 0.0f32;
        if kind == KIND_LINE {
            along = param * uniform(rng);
        }
        let cz = 2.0f32 * uniform(rng) - 1.0f32;
        let phi = two_pi * uniform(rng) - pi;
        let sz = f32::sqrt(f32::max(1.0f32 - cz * cz, 0.0f32));
        if kind == KIND_LINE {
            // Emission point uniform along the segment, reached by walking from its start.
            let tx = p.px + along * p.dx;
            let ty = p.py + along * p.dy;
            let tz = p.pz + along * p.dz;
            t = walk(faces, neigh, t, p.px, p.py, p.pz, tx, ty, tz, max_steps);
            p.px = tx;
            p.py = ty;
            p.pz = tz;
        }
        p.dx = sz * f32::cos(phi);
        p.dy = sz * f32::sin(phi);
        p.dz = cz;
    } else if kind != 0u32 {
        // Cone, disk and Gaussian use the basis u, v = d x u.
        let ux = r3[0];
        let uy = r3[1];
        let uz = r3[2];
        let vx = p.dy * uz - p.dz * uy;
        let vy = p.dz * ux - p.dx * uz;
        let vz = p.dx * uy - p.dy * ux;
        if kind == KIND_CONE {
            let c = 1.0f32 - uniform(rng) * (1.0f32 - param);
            let phi = two_pi * uniform(rng) - pi;
            let sn = f32::sqrt(f32::max(1.0f32 - c * c, 0.0f32));
            let cp = f32::cos(phi);
            let sp = f32::sin(phi);
            p.dx = c * p.dx + sn * (cp * ux + sp * vx);
            p.dy = c * p.dy + sn * (cp * uy + sp * vy);
            p.dz = c * p.dz + sn * (cp * uz + sp * vz);
        } else if kind == KIND_DISK || kind == KIND_GAUSSIAN {
            let u1 = uniform(rng);
            let mut r = param * f32::sqrt(u1);
            if kind == KIND_GAUSSIAN {
                r = param * f32::sqrt(-0.5f32 * f32::ln(u1));
            }
            let phi = two_pi * uniform(rng) - pi;
            let cp = f32::cos(phi);
            let sp = f32::sin(phi);
            let tx = p.px + r * (cp * ux + sp * vx);
            let ty = p.py + r * (cp * uy + sp * vy);
            let tz = p.pz + r * (cp * uz + sp * vz);
            t = walk(faces, neigh, t, p.px, p.py, p.pz, tx, ty, tz, max_steps);
            p.px = tx;
            p.py = ty;
            p.pz = tz;
        }
    }
    if kind == KIND_VOLUME || kind == KIND_SURFACE {
        // An element by Walker's alias method (exactly the element shares of the CPU's
        // cumulative table), then a uniform point in it.
        let first = u32::reinterpret(r0[3]);
        let count = u32::reinterpret(r1[3]);
        let i = next_u32(rng).mul_hi(count);
        let m = src_aux[((first + i) * AUX_VECS) as usize];
        let mut e = first + i;
        if uniform(rng) > m[0] {
            e = first + u32::reinterpret(m[1]);
        }
        let eb = (e * AUX_VECS) as usize;
        t = u32::reinterpret(src_aux[eb][2]);
        let v0 = src_aux[eb + 1];
        let v1 = src_aux[eb + 2];
        let v2 = src_aux[eb + 3];
        if kind == KIND_VOLUME {
            // Sorted uniforms a <= b <= c give barycentric (a, b - a, c - b, 1 - c).
            let mut a = uniform(rng);
            let mut b = uniform(rng);
            let mut c = uniform(rng);
            let lo = f32::min(a, b);
            b = f32::max(a, b);
            a = lo;
            let hi = f32::max(b, c);
            b = f32::min(b, c);
            c = hi;
            let lo2 = f32::min(a, b);
            b = f32::max(a, b);
            a = lo2;
            let v3 = src_aux[eb + 4];
            let w0 = a;
            let w1 = b - a;
            let w2 = c - b;
            let w3 = 1.0f32 - c;
            p.px = w0 * v0[0] + w1 * v1[0] + w2 * v2[0] + w3 * v3[0];
            p.py = w0 * v0[1] + w1 * v1[1] + w2 * v2[1] + w3 * v3[1];
            p.pz = w0 * v0[2] + w1 * v1[2] + w2 * v2[2] + w3 * v3[2];
            let cz = 2.0f32 * uniform(rng) - 1.0f32;
            let phi = two_pi * uniform(rng) - pi;
            let sz = f32::sqrt(f32::max(1.0f32 - cz * cz, 0.0f32));
            p.dx = sz * f32::cos(phi);
            p.dy = sz * f32::sin(phi);
            p.dz = cz;
        } else {
            let r = f32::sqrt(uniform(rng));
            let u2 = uniform(rng);
            let w0 = 1.0f32 - r;
            let w1 = r * (1.0f32 - u2);
            let w2 = r * u2;
            p.px = w0 * v0[0] + w1 * v1[0] + w2 * v2[0];
            p.py = w0 * v0[1] + w1 * v1[1] + w2 * v2[1];
            p.pz = w0 * v0[2] + w1 * v1[2] + w2 * v2[2];
            if param < 0.5f32 {
                // Lambertian about the inward normal n, basis (a, n x a) from the host.
                let n = src_aux[eb + 4];
                let ba = src_aux[eb + 5];
                let bx = n[1] * ba[2] - n[2] * ba[1];
                let by = n[2] * ba[0] - n[0] * ba[2];
                let bz = n[0] * ba[1] - n[1] * ba[0];
                let u1 = uniform(rng);
                let ct = f32::sqrt(u1);
                let st = f32::sqrt(f32::max(1.0f32 - u1, 0.0f32));
                let phi = two_pi * uniform(rng) - pi;
                let cp = f32::cos(phi);
                let sp = f32::sin(phi);
                p.dx = ct * n[0] + st * (cp * ba[0] + sp * bx);
                p.dy = ct * n[1] + st * (cp * ba[1] + sp * by);
                p.dz = ct * n[2] + st * (cp * ba[2] + sp * bz);
            }
        }
    }
    p.t = t;
    p.w = r2[3];
    p.time = 0.0f32;
    p.events = 0u32;
    p.s = 0.0f32;
    if t != 0u32 {
        set_material(p, mats, region[t as usize]);
        p.s = -f32::ln(uniform(rng));
        if r3[3] > 0.0f32 {
            acc.specular = bank(acc.specular, fixed(r3[3]), totals, T_SPECULAR);
        }
    }
    t != 0u32
}
