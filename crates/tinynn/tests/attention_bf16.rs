//! Attention's tile products under `Precision::Bf16` (its own test process: the precision is
//! process-wide): with AMX, S = Q K^T, P V and their gradients take bf16 operands and track
//! the f32 attention within bf16's rounding; without AMX they stay f32, bit for bit.

use tinynn::kernels::bf16gemm::Kernel;
use tinynn::layers::attention::Attention;
use tinynn::layers::matmul::{set_precision, Precision};

fn data(n: usize, seed: u32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            (s % 20_000) as f32 / 10_000.0 - 1.0
        })
        .collect()
}

/// out and dqkv of a causal attention over (b, t) rows.
fn run(a: &Attention, qkv: &[f32], dy: &[f32], b: usize, t: usize) -> (Vec<f32>, Vec<f32>) {
    let hd = a.n_head * a.head_dim;
    let (mut out, mut lse) = (vec![0.0; b * t * hd], vec![0.0; b * a.n_head * t]);
    a.forward(qkv, &mut out, &mut lse, b, t);
    let mut dqkv = vec![f32::NAN; b * t * a.qkv_width()];
    a.backward(dy, qkv, &out, &lse, &mut dqkv, b, t);
    (out, dqkv)
}

fn rel_err(x: &[f32], y: &[f32]) -> f32 {
    let scale = y.iter().fold(0f32, |m, v| m.max(v.abs()));
    x.iter().zip(y).fold(0f32, |m, (a, b)| m.max((a - b).abs())) / scale
}

#[test]
fn bf16_tiles_track_f32_attention() {
    // t = 150: three query tiles, the causal edge inside each; head size 48 (k padded on AMX)
    let (a, b, t) = (Attention::new(4, 2, 48), 2, 150);
    let qkv: Vec<f32> = data(b * t * a.qkv_width(), 1)
        .iter()
        .map(|v| 2.0 * v)
        .collect();
    let dy = data(b * t * 4 * 48, 2);
    set_precision(Precision::F32);
    let (o32, g32) = run(&a, &qkv, &dy, b, t);
    let bf16 = set_precision(Precision::Bf16) == Precision::Bf16;
    let (o16, g16) = run(&a, &qkv, &dy, b, t);
    set_precision(Precision::F32);
    if bf16 && Kernel::best() == Some(Kernel::Amx) {
        assert_ne!(o16, o32, "with AMX the tiles run in bf16");
        let (eo, eg) = (rel_err(&o16, &o32), rel_err(&g16, &g32));
        assert!(
            eo < 2e-2 && eg < 3e-2,
            "bf16 attention off f32: out {eo}, dqkv {eg}"
        );
    } else {
        eprintln!("no AMX here: attention's tiles stay f32 under bf16");
        assert_eq!((o16, g16), (o32, g32));
    }
}
