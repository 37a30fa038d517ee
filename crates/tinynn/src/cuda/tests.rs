//! The CUDA kernels: every source compiles with NVRTC for Ampere and Hopper (where libnvrtc
//! is found: `scripts/cuda-kernels.sh` installs PyPI's and sets `TOY_REQUIRE_NVRTC`, so CI
//! cannot skip it), NVRTC's log reaches the error, the disk cache; and, where a GPU exists,
//! each kernel against the CPU layer it mirrors. Without one those say they were skipped.

use super::*;
use crate::device::gpus;
use cudarc::driver::{CudaSlice, LaunchConfig, PushKernelArg};

fn nvrtc_or_skip(test: &str) -> bool {
    if unsafe { nvrtc::sys::is_culib_present() } {
        return true;
    }
    assert!(
        std::env::var_os("TOY_REQUIRE_NVRTC").is_none(),
        "TOY_REQUIRE_NVRTC is set but libnvrtc was not found (is its folder on LD_LIBRARY_PATH?)"
    );
    eprintln!("{test}: skipped: libnvrtc not found");
    false
}

pub(super) fn gpu_or_skip(test: &str) -> Option<Gpu> {
    match gpus() {
        Ok(g) if !g.is_empty() => Some(Gpu::open(0).expect("open cuda:0")),
        Ok(_) => {
            eprintln!("{test}: skipped: no GPU");
            None
        }
        Err(why) => {
            eprintln!("{test}: skipped: {why}");
            None
        }
    }
}

#[test]
fn every_kernel_compiles_for_ampere_and_hopper() {
    if !nvrtc_or_skip("every_kernel_compiles_for_ampere_and_hopper") {
        return;
    }
    for src in SOURCES {
        for arch in ["compute_80", "compute_90"] {
            let ptx = compile(&src, arch).unwrap_or_else(|e| panic!("{e}"));
            assert!(ptx.to_src().contains(".entry"), "{} for {arch}", src.name);
        }
    }
}

#[test]
fn a_kernel_that_does_not_compile_shows_nvrtcs_log() {
    if !nvrtc_or_skip("a_kernel_that_does_not_compile_shows_nvrtcs_log") {
        return;
    }
    let bad = Source {
        name: "broken.cu",
        text: "extern \"C\" __global__ void f(float* x) { x[0] = not_declared; }",
    };
    let err = compile(&bad, "compute_90").unwrap_err().to_string();
    assert!(
        err.starts_with("kernel broken.cu does not compile for compute_90"),
        "{err}"
    );
    assert!(err.contains("not_declared"), "{err}");
}

#[test]
fn compiled_kernels_are_cached_by_source_and_architecture() {
    if !nvrtc_or_skip("compiled_kernels_are_cached_by_source_and_architecture") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("toy-kernels-{}", std::process::id()));
    let first = compile_cached_in(&dir, &SOURCES[0], "compute_80").unwrap();
    let files: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().collect();
    assert_eq!(files.len(), 1);
    let name = files[0].file_name().to_string_lossy().into_owned();
    assert!(name.ends_with("-compute_80.ptx"), "{name}");
    let again = compile_cached_in(&dir, &SOURCES[0], "compute_80").unwrap();
    assert_eq!(first.to_src(), again.to_src());
    compile_cached_in(&dir, &SOURCES[0], "compute_90").unwrap();
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 2);
    std::fs::remove_dir_all(&dir).ok();
}

pub(super) fn rand_vec(n: usize, seed: u32) -> Vec<f32> {
    let mut s = seed.max(1);
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            (s >> 8) as f32 / (1u32 << 23) as f32 - 1.0
        })
        .collect()
}

pub(super) fn source(name: &str) -> &'static Source {
    SOURCES.iter().find(|s| s.name == name).unwrap()
}

#[test]
fn adamw_matches_the_cpu_optimizer_bit_for_bit() {
    let Some(gpu) = gpu_or_skip("adamw_matches_the_cpu_optimizer_bit_for_bit") else {
        return;
    };
    use crate::optim::{AdamW, AdamWConfig};
    let n = 10_000;
    let (mut p, g) = (rand_vec(n, 1), rand_vec(n, 2));
    let cfg = AdamWConfig::default();
    let (lr, scale, decay_range) = (3e-3f32, 0.7f32, 2_000..7_000);
    let s = &gpu.stream;
    let mut dp: CudaSlice<f32> = s.clone_htod(&p).unwrap();
    let dg: CudaSlice<f32> = s.clone_htod(&g).unwrap();
    let mut dm: CudaSlice<f32> = s.alloc_zeros(n).unwrap();
    let mut dv: CudaSlice<f32> = s.alloc_zeros(n).unwrap();
    let mask: Vec<u8> = (0..n).map(|i| decay_range.contains(&i) as u8).collect();
    let dmask: CudaSlice<u8> = s.clone_htod(&mask).unwrap();
    let mut cpu = AdamW::new(n, cfg);
    let f = gpu.function(source("adamw.cu"), "adamw_step").unwrap();
    for t in 1..=3i32 {
        cpu.step_scaled(&mut p, &g, scale, lr, std::slice::from_ref(&decay_range));
        let step = lr / (1.0 - (cfg.beta1 as f64).powi(t)) as f32;
        let inv = (1.0 / (1.0f64 - (cfg.beta2 as f64).powi(t)).sqrt()) as f32;
        let decay = 1.0 - lr * cfg.weight_decay;
        let n64 = n as u64;
        let mut b = s.launch_builder(&f);
        b.arg(&mut dp)
            .arg(&dg)
            .arg(&mut dm)
            .arg(&mut dv)
            .arg(&dmask)
            .arg(&n64);
        b.arg(&cfg.beta1)
            .arg(&cfg.beta2)
            .arg(&cfg.eps)
            .arg(&step)
            .arg(&inv);
        b.arg(&scale).arg(&decay);
        unsafe { b.launch(LaunchConfig::for_num_elems(n as u32)) }.unwrap();
    }
    let got = s.clone_dtoh(&dp).unwrap();
    for (i, (a, b)) in got.iter().zip(&p).enumerate() {
        assert_eq!(
            a.to_bits(),
            b.to_bits(),
            "param {i}: {a} on the GPU, {b} on the CPU"
        );
    }
}

#[test]
fn rmsnorm_forward_matches_the_cpu_layer() {
    let Some(gpu) = gpu_or_skip("rmsnorm_forward_matches_the_cpu_layer") else {
        return;
    };
    let (rows, c, eps) = (7, 576, 1e-5f32);
    let (x, w) = (rand_vec(rows * c, 3), rand_vec(c, 4));
    let norm = crate::layers::rmsnorm::RmsNorm::new(c, eps);
    let (mut y, mut rstd) = (vec![0f32; rows * c], vec![0f32; rows]);
    norm.forward(&x, &w, 1.0, &mut y, &mut rstd, rows);
    let s = &gpu.stream;
    let (dx, dw) = (s.clone_htod(&x).unwrap(), s.clone_htod(&w).unwrap());
    let mut dy: CudaSlice<f32> = s.alloc_zeros(rows * c).unwrap();
    let mut dr: CudaSlice<f32> = s.alloc_zeros(rows).unwrap();
    let f = gpu
        .function(source("rmsnorm.cu"), "rmsnorm_forward")
        .unwrap();
    let (ci, one) = (c as i32, 1.0f32);
    let mut b = s.launch_builder(&f);
    b.arg(&dx)
        .arg(&dw)
        .arg(&mut dy)
        .arg(&mut dr)
        .arg(&ci)
        .arg(&eps)
        .arg(&one);
    let cfg = LaunchConfig {
        grid_dim: (rows as u32, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    unsafe { b.launch(cfg) }.unwrap();
    let got = s.clone_dtoh(&dy).unwrap();
    for (a, b) in got.iter().zip(&y) {
        assert!((a - b).abs() <= 1e-5 * b.abs().max(1e-3), "{a} vs {b}");
    }
}

#[test]
fn bf16_casts_match_the_cpu_bits() {
    let Some(gpu) = gpu_or_skip("bf16_casts_match_the_cpu_bits") else {
        return;
    };
    let mut x = rand_vec(4096, 5);
    x.extend([f32::NAN, f32::INFINITY, -0.0, 1.0 + 1.0 / 256.0, 3.0e38]);
    let s = &gpu.stream;
    let dx = s.clone_htod(&x).unwrap();
    let mut dy: CudaSlice<u16> = s.alloc_zeros(x.len()).unwrap();
    let f = gpu
        .function(source("elementwise.cu"), "f32_to_bf16")
        .unwrap();
    let n = x.len() as u64;
    let mut b = s.launch_builder(&f);
    b.arg(&dx).arg(&mut dy).arg(&n);
    unsafe { b.launch(LaunchConfig::for_num_elems(x.len() as u32)) }.unwrap();
    let got = s.clone_dtoh(&dy).unwrap();
    for (v, g) in x.iter().zip(&got) {
        assert_eq!(*g, crate::quant::float::f32_to_bf16(*v), "{v}");
    }
}

#[test]
fn rope_matches_the_cpu_layer_bit_for_bit_both_ways() {
    let Some(gpu) = gpu_or_skip("rope_matches_the_cpu_layer_bit_for_bit_both_ways") else {
        return;
    };
    use crate::layers::rope::{Rope, RopeSpec};
    let (rows, heads, d) = (12, 3, 64);
    for neox in [false, true] {
        let spec = RopeSpec {
            head_dim: d,
            n_rot: 48,
            neox,
            base: 10000.0,
            freq_factors: Some((0..24).map(|i| 1.0 + i as f32 / 8.0).collect()),
        };
        let rope = Rope::with(&spec, rows);
        let x = rand_vec(rows * heads * d, 6);
        let s = &gpu.stream;
        let (cos, sin) = rope.tables();
        let (dc, ds) = (s.clone_htod(cos).unwrap(), s.clone_htod(sin).unwrap());
        let pos: Vec<i32> = (0..rows as i32).collect();
        let dp = s.clone_htod(&pos).unwrap();
        let f = gpu.function(source("rope.cu"), "rope").unwrap();
        for sign in [1.0f32, -1.0] {
            let mut want = x.clone();
            match sign > 0.0 {
                true => rope.forward(&mut want, heads * d, heads, rows, rows),
                false => rope.backward(&mut want, heads * d, heads, rows, rows),
            }
            let mut dx = s.clone_htod(&x).unwrap();
            let (r, st, h, di, half, nx) = (
                rows as i32,
                (heads * d) as i32,
                heads as i32,
                d as i32,
                24i32,
                neox as i32,
            );
            let mut b = s.launch_builder(&f);
            b.arg(&mut dx)
                .arg(&dp)
                .arg(&dc)
                .arg(&ds)
                .arg(&r)
                .arg(&st)
                .arg(&h)
                .arg(&di);
            b.arg(&half).arg(&nx).arg(&sign);
            unsafe { b.launch(LaunchConfig::for_num_elems((rows * heads * 24) as u32)) }.unwrap();
            let got = s.clone_dtoh(&dx).unwrap();
            let same = got
                .iter()
                .zip(&want)
                .all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "neox {neox}, sign {sign}");
        }
    }
}
