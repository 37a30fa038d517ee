//! Weights as stored on the device: every device type decodes to the CPU's f32 bit for bit
//! and multiplies as the CPU's decoded matrix does (GPU only; skipped without one); a type
//! without a device decoder and a wrong byte count are refused by name (runs everywhere).

use super::layer_tests::rel_err;
use super::tests::{gpu_or_skip, rand_vec};
use super::weights::{check, DeviceWeights, DEVICE_TYPES};
use crate::quant::{dequantize, quantize, GgmlType};
use cudarc::driver::CudaSlice;

#[test]
fn a_type_without_a_gpu_kernel_or_a_short_matrix_is_refused_by_name() {
    let e = check("blk.0.ffn_down.weight", GgmlType::IQ2_XS, (4, 256), 0).unwrap_err();
    let e = e.to_string();
    assert!(
        e.starts_with("blk.0.ffn_down.weight: weight type IQ2_XS has no GPU kernel"),
        "{e}"
    );
    assert!(
        e.contains("Q4_K") && e.contains("toy quantize IN OUT --type Q8_0"),
        "{e}"
    );
    let e = check("w", GgmlType::Q4_0, (3, 64), 3 * 36 - 1)
        .unwrap_err()
        .to_string();
    assert_eq!(e, "w: 107 bytes for a (3, 64) Q4_0 matrix, which needs 108");
    let e = check("w", GgmlType::Q4_K, (1, 100), 144)
        .unwrap_err()
        .to_string();
    assert!(e.ends_with("which needs whole blocks per row"), "{e}");
    for ty in DEVICE_TYPES {
        let bytes = ty.row_bytes(512).unwrap() as usize * 3;
        check("w", ty, (3, 512), bytes).unwrap();
    }
}

#[test]
fn every_device_type_decodes_and_multiplies_as_the_cpu() {
    let Some(gpu) = gpu_or_skip("every_device_type_decodes_and_multiplies_as_the_cpu") else {
        return;
    };
    let s = &gpu.stream;
    let (rows, cols, n) = (37, 512, 3);
    let w = rand_vec(rows * cols, 51);
    let x = rand_vec(n * cols, 52);
    for ty in DEVICE_TYPES {
        let mut bytes = vec![0u8; ty.row_bytes(cols as u64).unwrap() as usize * rows];
        quantize(ty, &w, &mut bytes).unwrap();
        let mut want = vec![0f32; rows * cols];
        dequantize(ty, &bytes, &mut want).unwrap();
        let dw = DeviceWeights::upload(&gpu, "w", ty, (rows, cols), &bytes).unwrap();
        let got = s.clone_dtoh(&dw.dequantize(&gpu).unwrap()).unwrap();
        let same = got
            .iter()
            .zip(&want)
            .all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(
            same,
            "{}: the device decodes other values than the CPU",
            ty.name()
        );
        let reference: Vec<f32> = (0..n * rows)
            .map(|k| {
                let (t, r) = (k / rows, k % rows);
                let row = &want[r * cols..(r + 1) * cols];
                let xs = &x[t * cols..(t + 1) * cols];
                row.iter()
                    .zip(xs)
                    .map(|(a, b)| *a as f64 * *b as f64)
                    .sum::<f64>() as f32
            })
            .collect();
        let gx = s.clone_htod(&x).unwrap();
        let mut gy: CudaSlice<f32> = s.alloc_zeros(n * rows).unwrap();
        dw.matmul(&gpu, &gx, &mut gy, n).unwrap();
        let got = s.clone_dtoh(&gy).unwrap();
        assert!(
            rel_err(&got, &reference) < 1e-5,
            "{} product: {}",
            ty.name(),
            rel_err(&got, &reference)
        );
    }
}

/// The host harness: decodes `n` elements of type argv[1] from stdin to f32 on stdout.
const HARNESS: &str = r#"
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#define TOY_HOST_CHECK
#include "dequant.cu"
#define CASE(NAME, QK, BYTES)                                               \
    if (!strcmp(argv[1], #NAME)) {                                          \
        for (long i = 0; i < n; ++i) {                                      \
            float v = el_##NAME(b.data() + (i / QK) * BYTES, (int)(i % QK)); \
            fwrite(&v, 4, 1, stdout);                                       \
        }                                                                   \
        return 0;                                                           \
    }
int main(int argc, char** argv) {
    long n = atol(argv[2]);
    std::vector<u8> b;
    int c;
    while ((c = getchar()) != EOF) b.push_back((u8)c);
    CASE(f16, 1, 2) CASE(bf16, 1, 2) CASE(q4_0, 32, 18) CASE(q4_1, 32, 20) CASE(q5_0, 32, 22)
    CASE(q5_1, 32, 24) CASE(q8_0, 32, 34) CASE(q4_k, 256, 144) CASE(q5_k, 256, 176)
    CASE(q6_k, 256, 210)
    return 2;
}
"#;

#[test]
fn the_device_decoders_compiled_for_the_host_equal_the_cpu_ones() {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let dir = std::env::temp_dir().join(format!("toy-dequant-host-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kernels = concat!(env!("CARGO_MANIFEST_DIR"), "/src/cuda/kernels");
    std::fs::write(dir.join("harness.cpp"), HARNESS).unwrap();
    let exe = dir.join("harness");
    let built = Command::new("c++")
        .args(["-O1", "-std=c++17", "-I", kernels, "-o"])
        .arg(&exe)
        .arg(dir.join("harness.cpp"))
        .status();
    match built {
        Ok(s) if s.success() => {}
        Ok(s) => panic!("the host compiler failed on dequant.cu's decoders ({s})"),
        Err(e) => {
            eprintln!("the_device_decoders_compiled_for_the_host_equal_the_cpu_ones: skipped: no c++ ({e})");
            return;
        }
    }
    let cols = 1024;
    for ty in DEVICE_TYPES {
        // quantized values, and raw random bytes as blocks (every bit pattern but NaN scales)
        let mut bytes = vec![0u8; ty.row_bytes(cols as u64).unwrap() as usize * 2];
        let half = bytes.len() / 2;
        quantize(ty, &rand_vec(cols, 61), &mut bytes[..half]).unwrap();
        let mut s = 0x9e37_79b9u32;
        for b in &mut bytes[half..] {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            *b = (s >> 24) as u8 & 0xbf; // bit 6 clear in every byte: no f16/bf16 NaN or inf
        }
        let mut want = vec![0f32; 2 * cols];
        dequantize(ty, &bytes, &mut want).unwrap();
        let name = ty.name().to_ascii_lowercase();
        let mut child = Command::new(&exe)
            .args([name.as_str(), &(2 * cols).to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(&bytes).unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{name}: harness exit {}", out.status);
        let got: Vec<f32> = out
            .stdout
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(got.len(), want.len(), "{name}");
        for (i, (a, b)) in got.iter().zip(&want).enumerate() {
            assert_eq!(
                a.to_bits(),
                b.to_bits(),
                "{name} element {i}: device decoder {a}, CPU {b}"
            );
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}
