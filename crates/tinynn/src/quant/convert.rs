//! Whole-row conversion between f32 and any supported ggml type: the length checks, and
//! dispatch to the per-type block kernels (`float`, `legacy`, `kquants`,
//! `kquants_quantize`, `iq4`). Mirrors ggml's `to_float` / `from_float_ref` type traits over
//! ggml-quants.c.

use super::{
    float, iq2_quantize as iq2q, iq4, iq_lattice as iql, iq_quantize as iqq, kquants as kq,
    kquants_quantize as kqq, legacy, GgmlType, QK_K,
};

#[derive(Debug, thiserror::Error)]
pub enum QuantError {
    #[error("cannot {op} type {ty}: not supported")]
    Unsupported { ty: GgmlType, op: &'static str },
    #[error("{ty}: {n} elements is not a multiple of the block size {block}")]
    NotWholeBlocks {
        ty: GgmlType,
        n: usize,
        block: usize,
    },
    #[error("{ty}: {n} elements need {expected} bytes, got {got}")]
    ByteLength {
        ty: GgmlType,
        n: usize,
        expected: usize,
        got: usize,
    },
    #[error("{ty} is only written under an importance matrix (llama.cpp refuses it without one)")]
    NeedsWeights { ty: GgmlType },
    #[error("{ty}: an importance matrix of {got} weights for a row of {n} elements (one weight per column expected)")]
    Weights { ty: GgmlType, n: usize, got: usize },
}

/// Whether `dequantize` handles `ty`.
pub fn can_dequantize(ty: GgmlType) -> bool {
    use GgmlType::*;
    matches!(
        ty,
        F32 | F16
            | BF16
            | Q4_0
            | Q4_1
            | Q5_0
            | Q5_1
            | Q8_0
            | Q8_1
            | Q2_K
            | Q3_K
            | Q4_K
            | Q5_K
            | Q6_K
            | Q8_K
            | IQ4_NL
            | IQ4_XS
            | IQ2_XXS
            | IQ2_XS
            | IQ2_S
            | IQ3_XXS
            | IQ3_S
            | IQ1_S
            | IQ1_M
    )
}

/// Whether `quantize` handles `ty`.
pub fn can_quantize(ty: GgmlType) -> bool {
    use GgmlType::*;
    matches!(
        ty,
        F32 | F16
            | BF16
            | Q4_0
            | Q4_1
            | Q5_0
            | Q5_1
            | Q8_0
            | Q8_1
            | Q2_K
            | Q3_K
            | Q4_K
            | Q5_K
            | Q6_K
            | Q8_K
            | IQ4_NL
            | IQ4_XS
            | IQ2_XXS
            | IQ2_XS
            | IQ2_S
            | IQ3_XXS
            | IQ3_S
    )
}

/// Checks that `n` elements of `ty` are whole blocks taking exactly `bytes` bytes.
pub(crate) fn check_lengths(ty: GgmlType, n: usize, bytes: usize) -> Result<(), QuantError> {
    let block = ty.block_size();
    if !n.is_multiple_of(block) {
        return Err(QuantError::NotWholeBlocks { ty, n, block });
    }
    // n counts f32s, so n / block * type_size (<= 4 bytes an element here) cannot overflow.
    let expected = n / block * ty.type_size();
    if bytes != expected {
        return Err(QuantError::ByteLength {
            ty,
            n,
            expected,
            got: bytes,
        });
    }
    Ok(())
}

/// Runs `f` on each (`B`-byte block, `N`-element block) pair; lengths are checked already.
#[inline(always)]
fn each_block<const B: usize, const N: usize>(
    src: &[u8],
    dst: &mut [f32],
    f: impl Fn(&[u8; B], &mut [f32; N]),
) {
    for (x, y) in src
        .as_chunks::<B>()
        .0
        .iter()
        .zip(dst.as_chunks_mut::<N>().0)
    {
        f(x, y);
    }
}

#[inline(always)]
fn each_block_mut<const N: usize, const B: usize>(
    src: &[f32],
    dst: &mut [u8],
    f: impl Fn(&[f32; N], &mut [u8; B]),
) {
    for (x, y) in src
        .as_chunks::<N>()
        .0
        .iter()
        .zip(dst.as_chunks_mut::<B>().0)
    {
        f(x, y);
    }
}

fn unsupported(ty: GgmlType, op: &'static str) -> Result<(), QuantError> {
    Err(QuantError::Unsupported { ty, op })
}

/// Decode `dst.len()` elements from `src` (exactly `ty.row_bytes(dst.len())` bytes).
pub fn dequantize(ty: GgmlType, src: &[u8], dst: &mut [f32]) -> Result<(), QuantError> {
    use GgmlType::*;
    if !can_dequantize(ty) {
        return unsupported(ty, "dequantize");
    }
    check_lengths(ty, dst.len(), src.len())?;
    match ty {
        F32 => float::dequantize_f32(src, dst),
        F16 => float::dequantize_f16(src, dst),
        BF16 => float::dequantize_bf16(src, dst),
        Q4_0 => each_block(src, dst, legacy::dequantize_block_q4_0),
        Q4_1 => each_block(src, dst, legacy::dequantize_block_q4_1),
        Q5_0 => each_block(src, dst, legacy::dequantize_block_q5_0),
        Q5_1 => each_block(src, dst, legacy::dequantize_block_q5_1),
        Q8_0 => each_block(src, dst, legacy::dequantize_block_q8_0),
        Q8_1 => each_block(src, dst, legacy::dequantize_block_q8_1),
        Q2_K => each_block(src, dst, kq::dequantize_block_q2_k),
        Q3_K => each_block(src, dst, kq::dequantize_block_q3_k),
        Q4_K => each_block(src, dst, kq::dequantize_block_q4_k),
        Q5_K => each_block(src, dst, kq::dequantize_block_q5_k),
        Q6_K => each_block(src, dst, kq::dequantize_block_q6_k),
        Q8_K => each_block(src, dst, kq::dequantize_block_q8_k),
        IQ4_NL => each_block(src, dst, iq4::dequantize_block_iq4_nl),
        IQ4_XS => each_block(src, dst, iq4::dequantize_block_iq4_xs),
        IQ2_XXS => each_block(src, dst, iql::dequantize_block_iq2_xxs),
        IQ2_XS => each_block(src, dst, iql::dequantize_block_iq2_xs),
        IQ2_S => each_block(src, dst, iql::dequantize_block_iq2_s),
        IQ3_XXS => each_block(src, dst, iql::dequantize_block_iq3_xxs),
        IQ3_S => each_block(src, dst, iql::dequantize_block_iq3_s),
        IQ1_S => each_block(src, dst, iql::dequantize_block_iq1_s),
        IQ1_M => each_block(src, dst, iql::dequantize_block_iq1_m),
        I8 | I16 | I32 | I64 | F64 => unsupported(ty, "dequantize")?, // refused above
    }
    Ok(())
}

/// Encode `src` into `dst` (exactly `ty.row_bytes(src.len())` bytes), as ggml's reference
/// quantizer (`quantize_row_*_ref`: no importance matrix); IQ4_NL and IQ4_XS as
/// `quantize_iq4_*` without one (what llama-quantize writes; see `weighted`).
pub fn quantize(ty: GgmlType, src: &[f32], dst: &mut [u8]) -> Result<(), QuantError> {
    use GgmlType::*;
    if !can_quantize(ty) {
        return unsupported(ty, "quantize");
    }
    check_lengths(ty, src.len(), dst.len())?;
    match ty {
        F32 => float::quantize_f32(src, dst),
        F16 => float::quantize_f16(src, dst),
        BF16 => float::quantize_bf16(src, dst),
        Q4_0 => each_block_mut(src, dst, legacy::quantize_block_q4_0),
        Q4_1 => each_block_mut(src, dst, legacy::quantize_block_q4_1),
        Q5_0 => each_block_mut(src, dst, legacy::quantize_block_q5_0),
        Q5_1 => each_block_mut(src, dst, legacy::quantize_block_q5_1),
        Q8_0 => each_block_mut(src, dst, legacy::quantize_block_q8_0),
        Q8_1 => each_block_mut(src, dst, legacy::quantize_block_q8_1),
        Q2_K => each_block_mut(src, dst, kqq::quantize_block_q2_k),
        Q3_K => each_block_mut(src, dst, kqq::quantize_block_q3_k),
        Q4_K => each_block_mut(src, dst, kqq::quantize_block_q4_k),
        Q5_K => each_block_mut(src, dst, kqq::quantize_block_q5_k),
        Q6_K => each_block_mut(src, dst, kqq::quantize_block_q6_k),
        Q8_K => each_block_mut(src, dst, kqq::quantize_block_q8_k),
        IQ4_NL => src
            .chunks_exact(32)
            .zip(dst.chunks_exact_mut(18))
            .for_each(|(x, y)| iq4::quantize_iq4(x, y, None)),
        IQ4_XS => src
            .chunks_exact(QK_K)
            .zip(dst.chunks_exact_mut(136))
            .for_each(|(x, y)| iq4::quantize_iq4(x, y, None)),
        IQ3_XXS => iqq::quantize_iq3_xxs(src, dst, None),
        IQ3_S => iqq::quantize_iq3_s(src, dst, None),
        IQ2_S => iq2q::quantize_iq2_s(src, dst, None),
        IQ2_XS | IQ2_XXS => return Err(QuantError::NeedsWeights { ty }),
        I8 | I16 | I32 | I64 | F64 | IQ1_S | IQ1_M => {
            unsupported(ty, "quantize")? // refused above
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use GgmlType::*;

    #[test]
    fn length_errors_name_what_was_wrong() {
        let mut out = vec![0f32; 576];
        for ty in [Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K, IQ4_XS] {
            let err = dequantize(ty, &[0u8; 4096], &mut out).unwrap_err();
            assert!(
                matches!(
                    err,
                    QuantError::NotWholeBlocks {
                        n: 576,
                        block: 256,
                        ..
                    }
                ),
                "{ty}: {err}"
            );
            if can_quantize(ty) {
                let err = quantize(ty, &out, &mut [0u8; 4096]).unwrap_err();
                assert!(matches!(err, QuantError::NotWholeBlocks { n: 576, .. }));
            }
        }
        // 576 is 18 whole Q4_0 blocks of 18 bytes: 324 bytes, so 323 is one short.
        let err = dequantize(Q4_0, &[0u8; 323], &mut out).unwrap_err();
        assert!(matches!(
            err,
            QuantError::ByteLength {
                n: 576,
                expected: 324,
                got: 323,
                ..
            }
        ));
        assert_eq!(
            err.to_string(),
            "Q4_0: 576 elements need 324 bytes, got 323"
        );
        let err = quantize(Q8_0, &out, &mut [0u8; 700]).unwrap_err();
        assert!(matches!(
            err,
            QuantError::ByteLength {
                expected: 612,
                got: 700,
                ..
            }
        ));
        let err = dequantize(F16, &[0u8; 3], &mut out[..2]).unwrap_err();
        assert!(matches!(
            err,
            QuantError::ByteLength {
                expected: 4,
                got: 3,
                ..
            }
        ));
    }

    #[test]
    fn unsupported_types_are_refused() {
        let err = dequantize(I32, &[0u8; 4], &mut [0f32; 1]).unwrap_err();
        assert!(matches!(
            err,
            QuantError::Unsupported {
                ty: I32,
                op: "dequantize"
            }
        ));
        let err = quantize(I16, &[0f32; 2], &mut [0u8; 4]).unwrap_err();
        assert_eq!(err.to_string(), "cannot quantize type I16: not supported");
        for ty in GgmlType::ALL {
            assert!(!can_quantize(ty) || can_dequantize(ty), "{ty}");
        }
    }

    #[test]
    fn can_flags_match_what_the_dispatch_does() {
        for ty in GgmlType::ALL {
            let n = ty.block_size();
            let mut bytes = vec![0u8; ty.type_size()];
            let mut vals = vec![0f32; n];
            assert_eq!(
                dequantize(ty, &bytes, &mut vals).is_ok(),
                can_dequantize(ty),
                "{ty}"
            );
            // the 2-bit lattice types IQ2_XS and IQ2_XXS are written only with weights
            let r = quantize(ty, &vals, &mut bytes);
            let weights = matches!(r, Err(QuantError::NeedsWeights { .. }));
            assert_eq!(r.is_ok() || weights, can_quantize(ty), "{ty}");
        }
    }

    #[test]
    fn empty_rows_are_fine() {
        dequantize(Q4_K, &[], &mut []).unwrap();
        quantize(Q6_K, &[], &mut []).unwrap();
    }
}
