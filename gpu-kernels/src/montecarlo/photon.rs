//! A packet in flight and the tetrahedron geometry both the transport and the launch use:
//! the packet's state with its region's optical constants, loading a region's material,
//! the exit face of a ray and a component of a neighbour record.

use cubecl::prelude::*;

/// A packet in flight, with the optical constants of its current region.
#[derive(CubeType)]
pub(crate) struct Photon {
    pub px: f32,
    pub py: f32,
    pub pz: f32,
    pub dx: f32,
    pub dy: f32,
    pub dz: f32,
    pub w: f32,
    /// Dimensionless optical depth left to the next interaction.
    pub s: f32,
    /// ns of flight.
    pub time: f32,
    pub t: u32,
    pub events: u32,
    pub inv_mut: f32,
    pub absorb: f32,
    pub mu_t: f32,
    /// ns per length unit of flight (n / c).
    pub n_over_c: f32,
    pub n: f32,
    pub g: f32,
    /// With `F_KEEP_PLANES`: the face planes of tetrahedron `ft`, kept across events.
    pub f0: Vector<f32, Const<4>>,
    pub f1: Vector<f32, Const<4>>,
    pub f2: Vector<f32, Const<4>>,
    pub f3: Vector<f32, Const<4>>,
    pub ft: u32,
    /// With `F_DETECT`: the photon's global index (low, high word), its region (1-based),
    /// its scatterings, and per region 1..=R (index r - 1) the path length travelled there
    /// and, with momentum, the sum of 1 - cos theta of its scatterings there. Without
    /// `F_DETECT` the arrays hold one unused element.
    pub idx_lo: u32,
    pub idx_hi: u32,
    pub region: u32,
    pub scatters: u32,
    pub ppath: Array<f32>,
    pub mom: Array<f32>,
}

/// A zero packet; `det_regions` (R with `F_DETECT`, else 0) and `momentum` size its
/// per-lane path arrays.
#[cube]
pub(crate) fn photon_zero(#[comptime] det_regions: u32, #[comptime] momentum: bool) -> Photon {
    Photon {
        px: 0.0f32,
        py: 0.0f32,
        pz: 0.0f32,
        dx: 0.0f32,
        dy: 0.0f32,
        dz: 1.0f32,
        w: 0.0f32,
        s: 0.0f32,
        time: 0.0f32,
        t: 0u32,
        events: 0u32,
        inv_mut: 0.0f32,
        absorb: 0.0f32,
        mu_t: 0.0f32,
        n_over_c: 0.0f32,
        n: 1.0f32,
        g: 0.0f32,
        f0: Vector::new(0.0f32),
        f1: Vector::new(0.0f32),
        f2: Vector::new(0.0f32),
        f3: Vector::new(0.0f32),
        ft: 0u32,
        idx_lo: 0u32,
        idx_hi: 0u32,
        region: 0u32,
        scatters: 0u32,
        ppath: Array::<f32>::new(comptime!(if det_regions > 0 {
            det_regions as usize
        } else {
            1usize
        })),
        mom: Array::<f32>::new(comptime!(if momentum && det_regions > 0 {
            det_regions as usize
        } else {
            1usize
        })),
    }
}

/// Load the optical constants of region `r` (two float4: [1/mu, g, n, absorb],
/// [mu, n/c, 0, 0]; see montecarlo-core `gpu::transport::pack_materials`: mu is mus with
/// the track-length estimator, mu_t with the interaction one).
#[cube]
pub(crate) fn set_material(p: &mut Photon, mats: &Array<Vector<f32, Const<4>>>, r: u32) {
    let m0 = mats[(r * 2u32) as usize];
    let m1 = mats[(r * 2u32 + 1u32) as usize];
    p.inv_mut = m0[0];
    p.g = m0[1];
    p.n = m0[2];
    p.absorb = m0[3];
    p.mu_t = m1[0];
    p.n_over_c = m1[1];
}

/// Distance along the direction to the first face the ray leaves through, and that face.
#[derive(CubeType)]
pub(crate) struct Exit {
    pub h: f32,
    pub f: u32,
}

/// Exit face of tetrahedron `t` from `p` along unit `d` (faces with n.d <= 0 are never
/// exits; the first of equal distances wins, as on the CPU; negative distances clamp to 0).
#[cube]
pub(crate) fn exit_face(
    faces: &Array<Vector<f32, Const<4>>>,
    t: u32,
    px: f32,
    py: f32,
    pz: f32,
    dx: f32,
    dy: f32,
    dz: f32,
) -> Exit {
    let b = (t * 4u32) as usize;
    exit_of(
        faces[b],
        faces[b + 1],
        faces[b + 2],
        faces[b + 3],
        px,
        py,
        pz,
        dx,
        dy,
        dz,
    )
}

/// [`exit_face`] for the planes `a0..a3` of a tetrahedron.
#[cube]
#[allow(clippy::too_many_arguments)]
pub(crate) fn exit_of(
    a0: Vector<f32, Const<4>>,
    a1: Vector<f32, Const<4>>,
    a2: Vector<f32, Const<4>>,
    a3: Vector<f32, Const<4>>,
    px: f32,
    py: f32,
    pz: f32,
    dx: f32,
    dy: f32,
    dz: f32,
) -> Exit {
    let big = 3.0e38f32;
    let c0 = a0[0] * dx + a0[1] * dy + a0[2] * dz;
    let c1 = a1[0] * dx + a1[1] * dy + a1[2] * dz;
    let c2 = a2[0] * dx + a2[1] * dy + a2[2] * dz;
    let c3 = a3[0] * dx + a3[1] * dy + a3[2] * dz;
    let q0 = a0[3] - (a0[0] * px + a0[1] * py + a0[2] * pz);
    let q1 = a1[3] - (a1[0] * px + a1[1] * py + a1[2] * pz);
    let q2 = a2[3] - (a2[0] * px + a2[1] * py + a2[2] * pz);
    let q3 = a3[3] - (a3[0] * px + a3[1] * py + a3[2] * pz);
    let h0 = select(c0 > 0.0f32, q0 / c0, big);
    let h1 = select(c1 > 0.0f32, q1 / c1, big);
    let h2 = select(c2 > 0.0f32, q2 / c2, big);
    let h3 = select(c3 > 0.0f32, q3 / c3, big);
    let mut h = h0;
    let mut f = 0u32;
    if h1 < h {
        h = h1;
        f = 1u32;
    }
    if h2 < h {
        h = h2;
        f = 2u32;
    }
    if h3 < h {
        h = h3;
        f = 3u32;
    }
    Exit {
        h: f32::max(h, 0.0f32),
        f,
    }
}

/// Component `f` of a neighbour record.
#[cube]
pub(crate) fn pick(v: Vector<i32, Const<4>>, f: u32) -> i32 {
    let mut r = v[0];
    r = select(f == 1u32, v[1], r);
    r = select(f == 2u32, v[2], r);
    select(f == 3u32, v[3], r)
}
