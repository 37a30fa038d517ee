//! Micro-benchmarks of the kernels (`cargo bench -p tinynn`): each reports throughput as
//! bytes of weights streamed (GB/s) for the matrix-vector products of decode, and as
//! elements (multiply-adds, so GFLOP/s = 2 x Gelem/s) for the products of prefill.
//! Shapes are SmolLM2-135M's: K = 576 or 1536, N = 576, 1536 and the 49152-row head.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use std::hint::black_box;
use tinynn::kernels::attention::{causal_attention, AttnShape};
use tinynn::kernels::qmatmul::{matmul, matvec};
use tinynn::kernels::repack::Packed;
use tinynn::kernels::QMat;
use tinynn::quant::{quantize, GgmlType};

fn data(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E3779B97F4A7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

fn weights(ty: GgmlType, n: usize, k: usize) -> Vec<u8> {
    let wf = data(n * k, (n * k) as u64);
    let rb = ty.row_bytes(k as u64).expect("whole blocks") as usize;
    let mut bytes = vec![0u8; rb * n];
    for r in 0..n {
        quantize(
            ty,
            &wf[r * k..(r + 1) * k],
            &mut bytes[r * rb..(r + 1) * rb],
        )
        .expect("quantize");
    }
    bytes
}

/// The matrix as stored, and as repacked at load where this CPU has an interleaved kernel
/// (what models use).
fn variants<'a>(w: QMat<'a>, packed: Option<&'a Packed>) -> Vec<(&'static str, QMat<'a>)> {
    let mut v = vec![("", w)];
    if let Some(p) = packed {
        v.push((
            "_packed",
            QMat {
                packed: Some(p),
                ..w
            },
        ));
    }
    v
}

const TYPES: [GgmlType; 7] = [
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q8_0,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
    GgmlType::F16,
];

fn decode(c: &mut Criterion) {
    let mut g = c.benchmark_group("matvec");
    for ty in TYPES {
        for (n, k) in [(1536, 576), (576, 1536), (49152, 576)] {
            if ty.row_bytes(k as u64).is_none() {
                continue;
            }
            let bytes = weights(ty, n, k);
            let w = QMat::new(ty, n, k, &bytes).expect("matrix");
            let packed = Packed::new(&w);
            let x = data(k, 1);
            let mut y = vec![0f32; n];
            g.throughput(Throughput::Bytes(bytes.len() as u64));
            for (label, w) in variants(w, packed.as_ref()) {
                g.bench_with_input(
                    BenchmarkId::new(format!("{}{label}", ty.name()), format!("{n}x{k}")),
                    &w,
                    |b, w| b.iter(|| matvec(w, black_box(&x), &mut y)),
                );
            }
        }
    }
    g.finish();
}

fn prefill(c: &mut Criterion) {
    let mut g = c.benchmark_group("matmul_t128");
    g.sample_size(20);
    let t = 128;
    for ty in TYPES {
        for (n, k) in [(1536, 576), (576, 1536)] {
            if ty.row_bytes(k as u64).is_none() {
                continue;
            }
            let bytes = weights(ty, n, k);
            let w = QMat::new(ty, n, k, &bytes).expect("matrix");
            let packed = Packed::new(&w);
            let x = data(t * k, 2);
            let mut y = vec![0f32; t * n];
            g.throughput(Throughput::Elements((t * n * k) as u64));
            for (label, w) in variants(w, packed.as_ref()) {
                g.bench_with_input(
                    BenchmarkId::new(format!("{}{label}", ty.name()), format!("{n}x{k}")),
                    &w,
                    |b, w| b.iter(|| matmul(w, black_box(&x), t, &mut y)),
                );
            }
        }
    }
    g.finish();
}

fn attention(c: &mut Criterion) {
    let mut g = c.benchmark_group("attention");
    let (h, hkv, d, ctx) = (9, 3, 64, 512);
    let k: Vec<half::f16> = data(hkv * ctx * d, 3)
        .iter()
        .map(|v| half::f16::from_f32(*v))
        .collect();
    let v: Vec<half::f16> = data(hkv * ctx * d, 4)
        .iter()
        .map(|v| half::f16::from_f32(*v))
        .collect();
    for (t, pos0) in [(1usize, 511usize), (128, 0)] {
        let q = data(t * h * d, 5);
        let mut out = vec![0f32; t * h * d];
        let s = AttnShape {
            n_head: h,
            n_kv_head: hkv,
            head_dim: d,
            ctx,
            f16_accumulate: t < 64,
            window: None,
        };
        // multiply-adds of q.k and of the weighted values
        let macs: usize = (0..t).map(|i| 2 * (pos0 + i + 1) * d * h).sum();
        g.throughput(Throughput::Elements(macs as u64));
        g.bench_function(format!("t{t}_pos{pos0}"), |b| {
            b.iter(|| causal_attention(black_box(&q), &k, &v, s, pos0, &mut out))
        });
    }
    g.finish();
}

/// The three products of a training step's linear layer (forward x W^T, dx = dy W,
/// dW = dy^T x) in f32 (the `gemm` crate) and in bf16 (`kernels::bf16gemm`), at the shapes of
/// the ViT on Fashion-MNIST (2176 rows, 128 -> 384) and of recipes/small.toml's MLP.
fn train_products(c: &mut Criterion) {
    use tinynn::layers::matmul::{matmul_dytx, matmul_dyw, matmul_xwt, set_precision, Precision};
    let mut g = c.benchmark_group("train_products");
    g.sample_size(10);
    for (n, k, m) in [(2176usize, 128usize, 384usize), (4096, 384, 1536)] {
        let (x, w, dy) = (data(n * k, 1), data(m * k, 2), data(n * m, 3));
        let (mut y, mut dx, mut dw) = (vec![0f32; n * m], vec![0f32; n * k], vec![0f32; m * k]);
        g.throughput(Throughput::Elements((3 * n * k * m) as u64));
        for p in [Precision::F32, Precision::Bf16] {
            if set_precision(p) != p {
                continue;
            }
            g.bench_function(format!("{p:?}_n{n}_k{k}_m{m}"), |b| {
                b.iter(|| {
                    matmul_xwt(&mut y, black_box(&x), &w, n, k, m, false);
                    matmul_dyw(&mut dx, &dy, &w, n, k, m, false);
                    matmul_dytx(&mut dw, &dy, &x, n, k, m);
                })
            });
        }
        set_precision(Precision::F32);
    }
    g.finish();
}

/// The cost of one parallel loop of a decode step (its synchronisation): 100 loops of 32 tiny
/// tasks inside `spin::busy`, through the polling workers (`team`) and on rayon's fork/join;
/// time per element is time per loop.
fn sync(c: &mut Criterion) {
    use rayon::prelude::*;
    use std::sync::atomic::{AtomicU64, Ordering};
    let mut g = c.benchmark_group("parallel_loop");
    g.throughput(Throughput::Elements(100));
    let sink = AtomicU64::new(0);
    let task = |i: usize| {
        sink.fetch_add(black_box(i as u64), Ordering::Relaxed);
    };
    // `busy` polls only inside a pool
    let pool = rayon::ThreadPoolBuilder::new().build().expect("pool");
    g.bench_function("team", |b| {
        b.iter(|| {
            pool.install(|| {
                tinynn::spin::busy(|| (0..100).for_each(|_| tinynn::team::par_for(32, task)))
            })
        })
    });
    g.bench_function("rayon", |b| {
        b.iter(|| {
            pool.install(|| {
                tinynn::spin::busy(|| (0..100).for_each(|_| (0..32).into_par_iter().for_each(task)))
            })
        })
    });
    g.finish();
}

criterion_group!(benches, decode, prefill, attention, train_products, sync);
criterion_main!(benches);
