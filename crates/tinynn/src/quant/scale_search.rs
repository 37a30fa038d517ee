//! The scale searches behind ggml's k-quant reference quantizers: `nearest_int`,
//! `make_qx_quants` (symmetric), `make_q3_quants` (symmetric, coordinate descent) and
//! `make_qkx2_quants` (asymmetric scale + min; with weights it is also ggml's
//! `make_qkx3_quants`, which differs only where `max < min`, i.e. never for finite input) and
//! `make_qp_quants` (non-negative, for the scales under an importance matrix), ported from ggml-quants.c with the same
//! float operation order so the chosen quants match bit for bit.
//!
//! Each takes a sub-block `x` of n <= 32 values and writes its quants to `l`.

/// Below this a sub-block counts as all zero (`GROUP_MAX_EPS`).
pub(crate) const GROUP_MAX_EPS: f32 = 1e-15;

/// Round to nearest, ties to even, via the 1.5 * 2^23 trick (valid for |x| <= 2^22).
#[inline(always)]
pub(crate) fn nearest_int(fval: f32) -> i32 {
    let val = fval + 12582912.0;
    (val.to_bits() & 0x007f_ffff) as i32 - 0x0040_0000
}

/// Symmetric quants `l` in `0..2 * nmax` (value `l - nmax`), returning the scale.
/// `rmse_type` 0 takes `-nmax / max` as is; otherwise it refines the scale by weighted least
/// squares over 18 nearby trial scales (weights `qw`, or a function of `x` chosen by
/// `rmse_type`: 1 `x^2`, 2 one, 3 `|x|`, else `sqrt|x|`); a negative type stops after the
/// first fit.
pub(crate) fn make_qx_quants(
    x: &[f32],
    l: &mut [i8],
    nmax: i32,
    rmse_type: i32,
    qw: Option<&[f32]>,
) -> f32 {
    let (mut max, mut amax) = (0f32, 0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    if amax < GROUP_MAX_EPS {
        l.fill(0);
        return 0.0;
    }
    let quant = |iscale: f32, v: f32| nearest_int(iscale * v).clamp(-nmax, nmax - 1);
    let mut iscale = -(nmax as f32) / max;
    if rmse_type == 0 {
        for (q, &v) in l.iter_mut().zip(x) {
            *q = (nmax + quant(iscale, v)) as i8;
        }
        return 1.0 / iscale;
    }
    let return_early = rmse_type < 0;
    let rmse_type = rmse_type.abs();
    let weight = |i: usize| match qw {
        Some(qw) => qw[i],
        None => match rmse_type {
            1 => x[i] * x[i],
            2 => 1.0,
            3 => x[i].abs(),
            _ => x[i].abs().sqrt(),
        },
    };
    let (mut sumlx, mut suml2) = (0f32, 0f32);
    for (i, &v) in x.iter().enumerate() {
        let q = quant(iscale, v);
        l[i] = (q + nmax) as i8;
        let (w, q) = (weight(i), q as f32);
        sumlx += w * v * q;
        suml2 += w * q * q;
    }
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    if return_early {
        return if suml2 > 0.0 {
            0.5 * (scale + 1.0 / iscale)
        } else {
            1.0 / iscale
        };
    }
    let mut best = scale * sumlx;
    for is in (-9..=9).filter(|&is| is != 0) {
        iscale = -(nmax as f32 + 0.1 * is as f32) / max;
        let (mut sumlx, mut suml2) = (0f32, 0f32);
        for (i, &v) in x.iter().enumerate() {
            let (w, q) = (weight(i), quant(iscale, v) as f32);
            sumlx += w * v * q;
            suml2 += w * q * q;
        }
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            for (q, &v) in l.iter_mut().zip(x) {
                *q = (nmax + quant(iscale, v)) as i8;
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// Symmetric quants `l` in `0..2 * nmax` for Q3_K; with `do_rmse`, up to five sweeps that
/// move one quant at a time while the `x^2`-weighted fit improves.
pub(crate) fn make_q3_quants(x: &[f32], l: &mut [i8], nmax: i32, do_rmse: bool) -> f32 {
    let (mut max, mut amax) = (0f32, 0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    if amax < GROUP_MAX_EPS {
        l.fill(0);
        return 0.0;
    }
    let iscale = -(nmax as f32) / max;
    if !do_rmse {
        for (q, &v) in l.iter_mut().zip(x) {
            *q = (nearest_int(iscale * v).clamp(-nmax, nmax - 1) + nmax) as i8;
        }
        return 1.0 / iscale;
    }
    let (mut sumlx, mut suml2) = (0f32, 0f32);
    for (q, &v) in l.iter_mut().zip(x) {
        let li = nearest_int(iscale * v).clamp(-nmax, nmax - 1);
        *q = li as i8;
        let w = v * v;
        sumlx += w * v * li as f32;
        suml2 += w * li as f32 * li as f32;
    }
    for _ in 0..5 {
        let mut n_changed = 0;
        for (q, &v) in l.iter_mut().zip(x) {
            let w = v * v;
            let cur = *q as f32;
            let mut slx = sumlx - w * v * cur;
            if slx > 0.0 {
                let mut sl2 = suml2 - w * cur * cur;
                let new_l = nearest_int(v * sl2 / slx).clamp(-nmax, nmax - 1);
                if new_l != *q as i32 {
                    slx += w * v * new_l as f32;
                    sl2 += w * new_l as f32 * new_l as f32;
                    if sl2 > 0.0 && slx * slx * suml2 > sumlx * sumlx * sl2 {
                        *q = new_l as i8;
                        sumlx = slx;
                        suml2 = sl2;
                        n_changed += 1;
                    }
                }
            }
        }
        if n_changed == 0 {
            break;
        }
    }
    for q in l.iter_mut() {
        *q += nmax as i8;
    }
    if suml2 > 0.0 {
        sumlx / suml2
    } else {
        0.0
    }
}

/// Asymmetric quants `l` in `0..=nmax` for `x ~ scale * l - min`, returning `(scale, min)`
/// with `min >= 0`. Starts from the min/max fit, then tries `nstep + 1` scales around
/// `nmax / (max - min)` (offsets `rmin + rdelta * is`), each refit by weighted least
/// squares, keeping the one with the lowest weighted error (absolute if `use_mad`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn make_qkx2_quants(
    x: &[f32],
    weights: &[f32],
    l: &mut [u8],
    nmax: i32,
    rmin: f32,
    rdelta: f32,
    nstep: i32,
    use_mad: bool,
) -> (f32, f32) {
    let n = x.len();
    let (mut min, mut max) = (x[0], x[0]);
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..n {
        if x[i] < min {
            min = x[i];
        }
        if x[i] > max {
            max = x[i];
        }
        let w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        l.fill(0);
        return (0.0, -min);
    }
    let error = |diff: f32| if use_mad { diff.abs() } else { diff * diff };
    let quant = |iscale: f32, v: f32, min: f32| nearest_int(iscale * (v - min)).clamp(0, nmax);
    let mut iscale = nmax as f32 / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_error = 0f32;
    for i in 0..n {
        l[i] = quant(iscale, x[i], min) as u8;
        best_error += weights[i] * error(scale * l[i] as f32 + min - x[i]);
    }
    if nstep < 1 {
        return (scale, -min);
    }
    let mut laux = [0u8; 32];
    let laux = &mut laux[..n];
    for is in 0..=nstep {
        iscale = (rmin + rdelta * is as f32 + nmax as f32) / (max - min);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0f32, 0f32, 0f32);
        for i in 0..n {
            let q = quant(iscale, x[i], min);
            laux[i] = q as u8;
            let (w, q) = (weights[i], q as f32);
            sum_l += w * q;
            sum_l2 += w * q * q;
            sum_xl += w * q * x[i];
        }
        let det = sum_w * sum_l2 - sum_l * sum_l;
        if det > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut cur_error = 0f32;
            for i in 0..n {
                cur_error += weights[i] * error(this_scale * laux[i] as f32 + this_min - x[i]);
            }
            if cur_error < best_error {
                l[..n].copy_from_slice(laux);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

/// Non-negative quants `l` in `0..=nmax` for `x >= 0` (the sub-block scales or mins of a
/// super-block) under weights `qw`, returning the scale: the max fit, then 8 nearby trial
/// scales, then up to 5 rounds of moving single quants while the weighted fit improves
/// (ggml's `make_qp_quants`, used with an importance matrix).
pub(crate) fn make_qp_quants(x: &[f32], l: &mut [u8], nmax: i32, qw: &[f32]) -> f32 {
    let n = x.len();
    let mut max = 0f32;
    for &v in x {
        max = if max > v { max } else { v };
    }
    if max < GROUP_MAX_EPS {
        l.fill(0);
        return 0.0;
    }
    let mut iscale = nmax as f32 / max;
    for i in 0..n {
        l[i] = nearest_int(iscale * x[i]) as u8;
    }
    let scale = 1.0 / iscale;
    let mut best_mse = 0f32;
    for i in 0..n {
        let diff = x[i] - scale * l[i] as f32;
        best_mse += qw[i] * diff * diff;
    }
    for is in -4..=4 {
        if is == 0 {
            continue;
        }
        let iscale_is = (0.1 * is as f32 + nmax as f32) / max;
        let scale_is = 1.0 / iscale_is;
        let mut mse = 0f32;
        for i in 0..n {
            let q = nearest_int(iscale_is * x[i]).min(nmax);
            let diff = x[i] - scale_is * q as f32;
            mse += qw[i] * diff * diff;
        }
        if mse < best_mse {
            best_mse = mse;
            iscale = iscale_is;
        }
    }
    let (mut sumlx, mut suml2) = (0f32, 0f32);
    for i in 0..n {
        let q = nearest_int(iscale * x[i]).min(nmax);
        l[i] = q as u8;
        sumlx += qw[i] * x[i] * q as f32;
        suml2 += qw[i] * q as f32 * q as f32;
    }
    for _ in 0..5 {
        let mut changed = false;
        for i in 0..n {
            let (w, li) = (qw[i], l[i] as f32);
            let mut slx = sumlx - w * x[i] * li;
            let mut sl2 = suml2 - w * li * li;
            if slx > 0.0 && sl2 > 0.0 {
                let new_l = nearest_int(x[i] * sl2 / slx).min(nmax);
                if new_l != l[i] as i32 {
                    slx += w * x[i] * new_l as f32;
                    sl2 += w * new_l as f32 * new_l as f32;
                    if slx * slx * suml2 > sumlx * sumlx * sl2 {
                        l[i] = new_l as u8;
                        sumlx = slx;
                        suml2 = sl2;
                        changed = true;
                    }
                }
            }
        }
        if !changed {
            break;
        }
    }
    if suml2 > 0.0 {
        sumlx / suml2
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_int_rounds_half_to_even() {
        assert_eq!(nearest_int(0.5), 0);
        assert_eq!(nearest_int(1.5), 2);
        assert_eq!(nearest_int(2.5), 2);
        assert_eq!(nearest_int(-0.5), 0);
        assert_eq!(nearest_int(-1.5), -2);
        assert_eq!(nearest_int(-3.7), -4);
        assert_eq!(nearest_int(4194303.0), 4194303);
    }

    #[test]
    fn qkx2_fits_an_exact_grid_exactly() {
        // x = 0.5 * l - 1 for l = 0..=15 twice: the search must recover scale 0.5, min 1.
        let x: Vec<f32> = (0..32).map(|i| 0.5 * (i % 16) as f32 - 1.0).collect();
        let w = vec![1f32; 32];
        let mut l = [0u8; 32];
        let (scale, min) = make_qkx2_quants(&x, &w, &mut l, 15, -1.0, 0.1, 20, false);
        assert_eq!((scale, min), (0.5, 1.0));
        assert!(l.iter().enumerate().all(|(i, &q)| q as usize == i % 16));
    }

    #[test]
    fn qx_quants_of_a_symmetric_grid() {
        // x = l for l in -4..4: scale 1 is exact, quants offset by nmax = 4.
        let x: Vec<f32> = (-4..4).map(|v| v as f32).collect();
        let mut l = [0i8; 8];
        let scale = make_qx_quants(&x, &mut l, 4, 1, None);
        assert_eq!(scale, 1.0);
        assert_eq!(l, [0, 1, 2, 3, 4, 5, 6, 7]);
        let mut l3 = [0i8; 8];
        assert_eq!(make_q3_quants(&x, &mut l3, 4, true), 1.0);
        assert_eq!(l3, l);
    }
}
