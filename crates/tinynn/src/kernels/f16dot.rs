//! Dot products of f16 weight rows with activations rounded to f16, as ggml's F16 matrix
//! products see them (`vec_dot_type` F16): the row is widened 16 lanes at a time (F16C), four
//! accumulators run over 64-element steps and are reduced pairwise, as `ggml_vec_dot_f16`.
//! Decode of an F16 model is a stream of these, so it runs at memory bandwidth. BF16 rows take
//! the same kernel against x rounded to bf16 (ggml's BF16 `vec_dot_type`).

use half::f16;

/// Scalar reference: `row` holds K f16 values (little-endian bytes), `x` K f32 values.
pub fn dot_f16_ref(row: &[u8], x: &[f32]) -> f32 {
    let mut sum = 0f64;
    for (c, xv) in row.chunks_exact(2).zip(x) {
        sum += (f16::from_le_bytes([c[0], c[1]]).to_f32() * xv) as f64;
    }
    sum as f32
}

/// A 16-bit row (f16, or bf16 when `BF16`) against x, already rounded to that type (ggml's
/// `vec_dot_type`): 16 lanes widened at a time (F16C for f16; a bf16 is the high half of an
/// f32, so a shift), four accumulators over 64-element steps reduced pairwise, as
/// `ggml_vec_dot_f16`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma,f16c")]
unsafe fn dot_16bit_avx512<const BF16: bool>(row: &[u8], x: &[f32]) -> f32 {
    use std::arch::x86_64::*;
    let k = (row.len() / 2).min(x.len());
    let (rp, xp) = (row.as_ptr(), x.as_ptr());
    let mut sum = [_mm512_setzero_ps(); 4];
    let steps = k / 64;
    for c in 0..steps {
        for (j, acc) in sum.iter_mut().enumerate() {
            let i = 64 * c + 16 * j;
            let h = _mm256_loadu_si256(rp.add(2 * i) as *const __m256i);
            let w = if BF16 {
                _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(h)))
            } else {
                _mm512_cvtph_ps(h)
            };
            *acc = _mm512_fmadd_ps(w, _mm512_loadu_ps(xp.add(i)), *acc);
        }
    }
    let v = _mm512_add_ps(_mm512_add_ps(sum[0], sum[2]), _mm512_add_ps(sum[1], sum[3]));
    let mut total = _mm512_reduce_add_ps(v) as f64;
    for (i, xv) in x.iter().enumerate().take(k).skip(steps * 64) {
        let w = if BF16 {
            bf16_at(row, i)
        } else {
            f16::from_le_bytes([row[2 * i], row[2 * i + 1]]).to_f32()
        };
        total += (w * xv) as f64;
    }
    total as f32
}

fn bf16_at(row: &[u8], i: usize) -> f32 {
    f32::from_bits((u16::from_le_bytes([row[2 * i], row[2 * i + 1]]) as u32) << 16)
}

/// [`dot_bf16`] in scalar code.
pub fn dot_bf16_ref(row: &[u8], x: &[f32]) -> f32 {
    let k = (row.len() / 2).min(x.len());
    (0..k).map(|i| (bf16_at(row, i) * x[i]) as f64).sum::<f64>() as f32
}

/// A bf16 row against x rounded to bf16, on the best kernel this CPU has.
pub fn dot_bf16(row: &[u8], x: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if has_fast_f16() {
        // SAFETY: the features were detected (AVX-512F); both slices are read within bounds.
        return unsafe { dot_16bit_avx512::<true>(row, x) };
    }
    dot_bf16_ref(row, x)
}

/// Whether the F16C/AVX-512 kernel runs on this CPU.
pub fn has_fast_f16() -> bool {
    use super::dot::{simd_level, SimdLevel};
    #[cfg(target_arch = "x86_64")]
    {
        simd_level() == SimdLevel::Avx512 && is_x86_feature_detected!("f16c")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (simd_level(), SimdLevel::Scalar);
        false
    }
}

/// An f16 row against f32 activations, on the best kernel this CPU has.
pub fn dot_f16(row: &[u8], x: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if has_fast_f16() {
        // SAFETY: the features were detected; both slices are read within their lengths.
        return unsafe { dot_16bit_avx512::<false>(row, x) };
    }
    dot_f16_ref(row, x)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fast_f16_dot_matches_reference() {
        for k in [64, 576, 1536, 80] {
            let w = super::super::test_data(k, k as u64);
            let row: Vec<u8> = w
                .iter()
                .flat_map(|v| f16::from_f32(*v).to_le_bytes())
                .collect();
            let x = super::super::test_data(k, 9);
            let (a, b) = (dot_f16(&row, &x), dot_f16_ref(&row, &x));
            assert!((a - b).abs() <= 1e-5 * (1.0 + b.abs()), "k={k}: {a} vs {b}");
            let row: Vec<u8> = w
                .iter()
                .flat_map(|v| half::bf16::from_f32(*v).to_le_bytes())
                .collect();
            let (a, b) = (dot_bf16(&row, &x), dot_bf16_ref(&row, &x));
            assert!(
                (a - b).abs() <= 1e-5 * (1.0 + b.abs()),
                "bf16 k={k}: {a} vs {b}"
            );
        }
    }
}
