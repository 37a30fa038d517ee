//! The GPU's layers against tinynn's CPU layers (issue 39): attention forward and backward
//! (GQA, a window, packed samples), LayerNorm, the activations and the cuBLASLt products in
//! f32 and bf16, each also repeated to check it gives the same bits twice. They need a GPU and
//! say they were skipped where there is none; where there is, `scripts/gpu-check.sh` runs them.

use super::gemm::Gemm;
use super::tests::{gpu_or_skip, rand_vec, source};
use super::*;
use crate::layers::attention::Attention;
use cudarc::driver::{CudaSlice, LaunchConfig, PushKernelArg};

/// max |a - b| over max |b| (at least 1e-3): one relative error for a whole array.
pub(super) fn rel_err(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    let scale = b.iter().fold(1e-3f32, |m, v| m.max(v.abs()));
    a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs())) / scale
}

fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

#[test]
fn attention_matches_the_cpu_layer_forward_and_backward() {
    let Some(gpu) = gpu_or_skip("attention_matches_the_cpu_layer_forward_and_backward") else {
        return;
    };
    let s = &gpu.stream;
    // (heads, kv heads, head size, window, packed)
    for (h, hkv, d, window, packed) in [
        (4, 2, 64, None, false),
        (3, 3, 40, Some(5), false),
        (4, 1, 256, None, true),
        (2, 2, 32, Some(3), true),
    ] {
        let a = Attention::new(h, hkv, d).with_window(window);
        let (b, t) = (2, 37);
        let n = b * t;
        let qkv = rand_vec(n * a.qkv_width(), 11);
        let dout = rand_vec(n * h * d, 12);
        let pos: Option<Vec<u32>> = packed.then(|| (0..n).map(|i| (i % t % 13) as u32).collect());
        let (mut out, mut lse) = (vec![0f32; n * h * d], vec![0f32; b * h * t]);
        a.forward_packed(&qkv, &mut out, &mut lse, b, t, pos.as_deref());
        let mut dqkv = vec![0f32; n * a.qkv_width()];
        a.backward_packed(&dout, &qkv, &out, &lse, &mut dqkv, b, t, pos.as_deref());

        let dpos: Option<CudaSlice<i32>> = pos.map(|p| {
            s.clone_htod(&p.iter().map(|&v| v as i32).collect::<Vec<_>>())
                .unwrap()
        });
        let (gq, gd) = (s.clone_htod(&qkv).unwrap(), s.clone_htod(&dout).unwrap());
        let mut go: CudaSlice<f32> = s.alloc_zeros(out.len()).unwrap();
        let mut gl: CudaSlice<f32> = s.alloc_zeros(lse.len()).unwrap();
        attention::forward(&gpu, &a, &gq, &mut go, &mut gl, b, t, dpos.as_ref()).unwrap();
        let what = format!("h {h} hkv {hkv} d {d} window {window:?} packed {packed}");
        let got = s.clone_dtoh(&go).unwrap();
        assert!(
            rel_err(&got, &out) < 1e-5,
            "out, {what}: {}",
            rel_err(&got, &out)
        );
        assert!(
            rel_err(&s.clone_dtoh(&gl).unwrap(), &lse) < 1e-5,
            "lse, {what}"
        );
        let mut runs = vec![];
        for _ in 0..2 {
            let mut di: CudaSlice<f32> = s.alloc_zeros(lse.len()).unwrap();
            let mut gdq: CudaSlice<f32> = s.alloc_zeros(dqkv.len()).unwrap();
            let inputs = (&gd, &gq, &go, &gl);
            attention::backward(&gpu, &a, inputs, &mut di, &mut gdq, b, t, dpos.as_ref()).unwrap();
            runs.push(s.clone_dtoh(&gdq).unwrap());
        }
        assert!(
            rel_err(&runs[0], &dqkv) < 1e-5,
            "dqkv, {what}: {}",
            rel_err(&runs[0], &dqkv)
        );
        assert!(same_bits(&runs[0], &runs[1]), "dqkv twice, {what}");
    }
}

#[test]
fn layernorm_matches_the_cpu_layer_forward_and_backward() {
    let Some(gpu) = gpu_or_skip("layernorm_matches_the_cpu_layer_forward_and_backward") else {
        return;
    };
    let (rows, c, eps, scale) = (9, 768, 1e-5f32, 0.8f32);
    let norm = crate::layers::layernorm::LayerNorm::new(c, eps);
    let (x, dy, bias) = (
        rand_vec(rows * c, 21),
        rand_vec(rows * c, 22),
        rand_vec(c, 23),
    );
    let w: Vec<f32> = rand_vec(c, 24).iter().map(|v| 1.0 + v).collect();
    let (mut y, mut mean, mut rstd) = (vec![0f32; rows * c], vec![0f32; rows], vec![0f32; rows]);
    norm.forward(&x, &w, &bias, scale, &mut y, &mut mean, &mut rstd, rows);
    let (mut dx, mut dw, mut db) = (vec![0.5f32; rows * c], vec![0.25f32; c], vec![0f32; c]);
    let (dx0, dw0, db0) = (dx.clone(), dw.clone(), db.clone());
    norm.backward(
        &dy, &x, &w, scale, &mean, &rstd, &mut dx, &mut dw, &mut db, rows,
    );

    let s = &gpu.stream;
    let up = |v: &[f32]| s.clone_htod(v).unwrap();
    let (gx, gw, gb, gdy) = (up(&x), up(&w), up(&bias), up(&dy));
    let mut gy: CudaSlice<f32> = s.alloc_zeros(rows * c).unwrap();
    let mut gm: CudaSlice<f32> = s.alloc_zeros(rows).unwrap();
    let mut gr: CudaSlice<f32> = s.alloc_zeros(rows).unwrap();
    let per_row = LaunchConfig {
        grid_dim: (rows as u32, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    let ci = c as i32;
    let f = gpu
        .function(source("layernorm.cu"), "layernorm_forward")
        .unwrap();
    let mut l = s.launch_builder(&f);
    l.arg(&gx)
        .arg(&gw)
        .arg(&gb)
        .arg(&mut gy)
        .arg(&mut gm)
        .arg(&mut gr);
    l.arg(&ci).arg(&eps).arg(&scale);
    unsafe { l.launch(per_row) }.unwrap();
    assert!(rel_err(&s.clone_dtoh(&gy).unwrap(), &y) < 1e-5, "y");
    let (mut gdx, mut gdw, mut gdb) = (up(&dx0), up(&dw0), up(&db0));
    let f = gpu
        .function(source("layernorm.cu"), "layernorm_backward_x")
        .unwrap();
    let mut l = s.launch_builder(&f);
    l.arg(&gdy)
        .arg(&gx)
        .arg(&gw)
        .arg(&gm)
        .arg(&gr)
        .arg(&mut gdx);
    l.arg(&ci).arg(&scale);
    unsafe { l.launch(per_row) }.unwrap();
    let f = gpu
        .function(source("layernorm.cu"), "layernorm_backward_wb")
        .unwrap();
    let ri = rows as i32;
    let mut l = s.launch_builder(&f);
    l.arg(&gdy)
        .arg(&gx)
        .arg(&gm)
        .arg(&gr)
        .arg(&mut gdw)
        .arg(&mut gdb);
    l.arg(&ri).arg(&ci).arg(&scale);
    unsafe { l.launch(LaunchConfig::for_num_elems(c as u32)) }.unwrap();
    assert!(rel_err(&s.clone_dtoh(&gdx).unwrap(), &dx) < 1e-5, "dx");
    assert!(rel_err(&s.clone_dtoh(&gdw).unwrap(), &dw) < 1e-5, "dw");
    assert!(rel_err(&s.clone_dtoh(&gdb).unwrap(), &db) < 1e-5, "db");
}

#[test]
fn activations_match_the_cpu_layers_both_ways() {
    let Some(gpu) = gpu_or_skip("activations_match_the_cpu_layers_both_ways") else {
        return;
    };
    use crate::layers::act;
    let (n, f) = (7, 1536);
    let gu: Vec<f32> = rand_vec(n * 2 * f, 31).iter().map(|v| 4.0 * v).collect();
    let da = rand_vec(n * f, 32);
    let s = &gpu.stream;
    let (ggu, gda) = (s.clone_htod(&gu).unwrap(), s.clone_htod(&da).unwrap());
    let (n64, f64_) = (n as u64, f as u64);
    type Glu = fn(&[f32], &mut [f32], usize, usize);
    type GluBack = fn(&[f32], &[f32], &mut [f32], usize, usize);
    let glus: [(&str, Glu, GluBack); 2] = [
        ("swiglu", act::swiglu_forward, act::swiglu_backward),
        ("geglu", act::geglu_forward, act::geglu_backward),
    ];
    for (name, fwd, bwd) in glus {
        let (mut a, mut dgu) = (vec![0f32; n * f], vec![0f32; n * 2 * f]);
        fwd(&gu, &mut a, n, f);
        bwd(&da, &gu, &mut dgu, n, f);
        let mut ga: CudaSlice<f32> = s.alloc_zeros(n * f).unwrap();
        let mut gdgu: CudaSlice<f32> = s.alloc_zeros(n * 2 * f).unwrap();
        let k = gpu
            .function(source("act.cu"), &format!("{name}_forward"))
            .unwrap();
        let mut l = s.launch_builder(&k);
        l.arg(&ggu).arg(&mut ga).arg(&n64).arg(&f64_);
        unsafe { l.launch(LaunchConfig::for_num_elems((n * f) as u32)) }.unwrap();
        let k = gpu
            .function(source("act.cu"), &format!("{name}_backward"))
            .unwrap();
        let mut l = s.launch_builder(&k);
        l.arg(&gda).arg(&ggu).arg(&mut gdgu).arg(&n64).arg(&f64_);
        unsafe { l.launch(LaunchConfig::for_num_elems((n * f) as u32)) }.unwrap();
        assert!(
            rel_err(&s.clone_dtoh(&ga).unwrap(), &a) < 1e-5,
            "{name} forward"
        );
        assert!(
            rel_err(&s.clone_dtoh(&gdgu).unwrap(), &dgu) < 1e-5,
            "{name} backward"
        );
    }
    let x = &gu[..n * f];
    let (mut y, mut dx) = (vec![0f32; n * f], vec![0f32; n * f]);
    act::gelu_forward(x, &mut y);
    act::gelu_backward(&da, x, &mut dx);
    let gx = s.clone_htod(x).unwrap();
    let mut gy: CudaSlice<f32> = s.alloc_zeros(n * f).unwrap();
    let mut gdx: CudaSlice<f32> = s.alloc_zeros(n * f).unwrap();
    let nn = (n * f) as u64;
    let k = gpu.function(source("act.cu"), "gelu_forward").unwrap();
    let mut l = s.launch_builder(&k);
    l.arg(&gx).arg(&mut gy).arg(&nn);
    unsafe { l.launch(LaunchConfig::for_num_elems(nn as u32)) }.unwrap();
    let k = gpu.function(source("act.cu"), "gelu_backward").unwrap();
    let mut l = s.launch_builder(&k);
    l.arg(&gda).arg(&gx).arg(&mut gdx).arg(&nn);
    unsafe { l.launch(LaunchConfig::for_num_elems(nn as u32)) }.unwrap();
    assert!(
        rel_err(&s.clone_dtoh(&gy).unwrap(), &y) < 1e-5,
        "gelu forward"
    );
    assert!(
        rel_err(&s.clone_dtoh(&gdx).unwrap(), &dx) < 1e-5,
        "gelu backward"
    );
}

/// Row-major y (n, o) = x (n, i) w^T in f64.
fn linear_ref(x: &[f32], w: &[f32], n: usize, i: usize, o: usize) -> Vec<f32> {
    let mut y = vec![0f32; n * o];
    for r in 0..n {
        for c in 0..o {
            let acc: f64 = (0..i)
                .map(|k| x[r * i + k] as f64 * w[c * i + k] as f64)
                .sum();
            y[r * o + c] = acc as f32;
        }
    }
    y
}

fn transpose(x: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    (0..cols * rows)
        .map(|k| x[(k % rows) * cols + k / rows])
        .collect()
}

#[test]
fn cublaslt_products_match_the_cpu_in_f32_and_bf16() {
    let Some(gpu) = gpu_or_skip("cublaslt_products_match_the_cpu_in_f32_and_bf16") else {
        return;
    };
    let gemm = Gemm::new(&gpu).unwrap();
    let s = &gpu.stream;
    let (n, i, o) = (37, 576, 192);
    let (x, w, dy) = (
        rand_vec(n * i, 41),
        rand_vec(o * i, 42),
        rand_vec(n * o, 43),
    );
    let dw0 = rand_vec(o * i, 44);
    let y = linear_ref(&x, &w, n, i, o);
    let dx = linear_ref(&dy, &transpose(&w, o, i), n, o, i); // dy (n, o) w (o, i)
    let dw_add = linear_ref(&transpose(&dy, n, o), &transpose(&x, n, i), o, n, i);
    let dw: Vec<f32> = dw0.iter().zip(&dw_add).map(|(a, b)| a + b).collect();
    // f32, twice
    let mut runs = vec![];
    for _ in 0..2 {
        let (gx, gw, gdy) = (
            s.clone_htod(&x).unwrap(),
            s.clone_htod(&w).unwrap(),
            s.clone_htod(&dy).unwrap(),
        );
        let mut gy: CudaSlice<f32> = s.alloc_zeros(n * o).unwrap();
        let mut gdx: CudaSlice<f32> = s.alloc_zeros(n * i).unwrap();
        let mut gdw = s.clone_htod(&dw0).unwrap();
        gemm.forward(&gx, &gw, &mut gy, (n, i, o)).unwrap();
        gemm.backward_x(&gdy, &gw, &mut gdx, (n, i, o)).unwrap();
        gemm.backward_w(&gdy, &gx, &mut gdw, (n, i, o)).unwrap();
        runs.push([gy, gdx, gdw].map(|g| s.clone_dtoh(&g).unwrap()));
    }
    for (k, (got, want)) in runs[0].iter().zip([&y, &dx, &dw]).enumerate() {
        assert!(
            rel_err(got, want) < 1e-5,
            "f32 product {k}: {}",
            rel_err(got, want)
        );
        assert!(same_bits(got, &runs[1][k]), "f32 product {k} twice");
    }
    // bf16 inputs: against the f64 product of the same rounded inputs
    let bits = |v: &[f32]| {
        v.iter()
            .map(|&a| crate::quant::float::f32_to_bf16(a))
            .collect::<Vec<u16>>()
    };
    let round = |v: &[f32]| {
        v.iter()
            .map(|&a| f32::from_bits((crate::quant::float::f32_to_bf16(a) as u32) << 16))
            .collect::<Vec<f32>>()
    };
    let (bx, bw) = (
        s.clone_htod(&bits(&x)).unwrap(),
        s.clone_htod(&bits(&w)).unwrap(),
    );
    let mut gy: CudaSlice<f32> = s.alloc_zeros(n * o).unwrap();
    gemm.forward(&bx, &bw, &mut gy, (n, i, o)).unwrap();
    let want = linear_ref(&round(&x), &round(&w), n, i, o);
    let got = s.clone_dtoh(&gy).unwrap();
    assert!(
        rel_err(&got, &want) < 1e-5,
        "bf16 forward: {}",
        rel_err(&got, &want)
    );
}
