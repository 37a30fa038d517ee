//! Importance matrices (`toy::quantize::imatrix`) on a tiny random llama built in memory:
//! what `compute` collects (every block matrix's input, checked against the activation taps),
//! the files in both of llama.cpp's formats, and quantizing under one.

#[path = "common/synthetic.rs"]
mod synthetic;

use synthetic::{gguf, load, weights, Spec, LLAMA};
use tinynn::quant::{dequantize, quantize_row, GgmlType};
use toy::gguf::GgufFile;
use toy::model::tap::Taps;
use toy::model::Logits;
use toy::quantize::imatrix::{compute, write_gguf, Imatrix};
use toy::quantize::mix::FileType;
use toy::quantize::{quantize_with, QuantizeOptions};

const SPEC: Spec = Spec {
    c: 256,
    ff: 512,
    d: 64,
    ctx: 32,
    ..LLAMA
};
const PARTS: [&str; 7] = [
    "attn_q",
    "attn_k",
    "attn_v",
    "attn_output",
    "ffn_gate",
    "ffn_up",
    "ffn_down",
];

fn tokens(n: usize) -> Vec<u32> {
    (0..n).map(|i| (i * 7 % 50) as u32).collect()
}

#[test]
fn compute_sums_the_input_of_every_block_matrix() {
    let m = load(gguf(&SPEC, &weights(&SPEC), GgmlType::F32)).unwrap();
    let toks = tokens(70);
    let (stats, chunks) = compute(&m, &toks, 32, Some(1), |_, _| {}).unwrap();
    assert_eq!(chunks, 2, "70 tokens make two whole chunks of 32");
    for l in 0..SPEC.n_layer {
        for p in PARTS {
            let e = &stats[&format!("blk.{l}.{p}.weight")];
            assert_eq!(e.rows, 64, "blk.{l}.{p}");
            assert!(e.sums.iter().all(|v| v.is_finite() && *v >= 0.0));
        }
        let q = &stats[&format!("blk.{l}.attn_q.weight")];
        assert_eq!(
            q,
            &stats[&format!("blk.{l}.attn_v.weight")],
            "q and v share their input"
        );
        assert_ne!(q.sums, stats[&format!("blk.{l}.ffn_up.weight")].sums);
    }
    assert_eq!(
        stats.len(),
        PARTS.len() * SPEC.n_layer,
        "block matrices only"
    );
    // attn_q's input is what the attn_norm tap sees: the sums of its squares, chunk by chunk
    let mut want = vec![0f32; SPEC.c];
    let mut state = m.new_state(32, 32);
    for chunk in toks.chunks_exact(32).take(2) {
        let mut input = chunk.to_vec();
        input[0] = 1;
        state.reset();
        state.taps = Some(Box::new(Taps::new("blk.1.attn_norm")));
        m.forward(&mut state, &input, Logits::Last).unwrap();
        let cap = &state.taps.take().unwrap().captured[0];
        for row in cap.data.chunks_exact(SPEC.c) {
            for (a, v) in want.iter_mut().zip(row) {
                *a += v * v;
            }
        }
    }
    assert_eq!(stats["blk.1.attn_q.weight"].sums, want);
    // too little text is an error, not an empty matrix
    assert!(compute(&m, &toks[..20], 32, None, |_, _| {}).is_err());
}

#[test]
fn both_file_formats_read_back_as_means() {
    let dir = std::env::temp_dir().join(format!("toy-imatrix-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let m = load(gguf(&SPEC, &weights(&SPEC), GgmlType::F32)).unwrap();
    let (stats, chunks) = compute(&m, &tokens(64), 32, Some(1), |_, _| {}).unwrap();
    let path = dir.join("imatrix.gguf");
    write_gguf(&path, &stats, "some.txt", chunks, 32).unwrap();
    let f = GgufFile::open(&path).unwrap();
    assert_eq!(f.get_str("general.type"), Some("imatrix"));
    assert_eq!(f.get_u64("imatrix.chunk_size"), Some(32));
    let back = Imatrix::read(&path).unwrap();
    assert_eq!(
        (back.chunks, back.datasets.clone()),
        (2, vec!["some.txt".to_string()])
    );
    let name = "blk.0.ffn_down.weight";
    let mean: Vec<f32> = stats[name].sums.iter().map(|s| s / 64.0).collect();
    assert_eq!(back.weights(name, SPEC.ff).unwrap().unwrap(), &mean[..]);
    let err = back.weights(name, 100).unwrap_err().to_string();
    assert!(
        err.contains("has 512 values, the tensor has 100 columns"),
        "{err}"
    );
    assert_eq!(back.weights("blk.9.attn_q.weight", 256).unwrap(), None);

    // llama-imatrix --output-format dat: values hold sum / count * calls
    let mut dat = Vec::new();
    dat.extend(1i32.to_le_bytes());
    dat.extend((name.len() as i32).to_le_bytes());
    dat.extend(name.as_bytes());
    dat.extend(4i32.to_le_bytes());
    dat.extend(2i32.to_le_bytes());
    dat.extend([8f32, 2.0].iter().flat_map(|v| v.to_le_bytes()));
    dat.extend(3i32.to_le_bytes());
    dat.extend(4i32.to_le_bytes());
    dat.extend(b"wiki");
    std::fs::write(dir.join("old.dat"), &dat).unwrap();
    let old = Imatrix::read(&dir.join("old.dat")).unwrap();
    assert_eq!(old.entries[name], vec![2.0, 0.5]);
    assert_eq!((old.chunks, old.datasets), (3, vec!["wiki".to_string()]));
    std::fs::write(dir.join("cut.dat"), &dat[..20]).unwrap();
    let err = Imatrix::read(&dir.join("cut.dat")).unwrap_err().to_string();
    assert!(
        err.contains("cut.dat") && err.contains("truncated"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn quantizing_under_an_imatrix_favours_the_important_columns() {
    let w = weights(&SPEC);
    let file = GgufFile::from_bytes(gguf(&SPEC, &w, GgmlType::F32)).unwrap();
    // every fourth input column of every matrix matters 1000 times more than the rest
    let mut im = Imatrix::default();
    for l in 0..SPEC.n_layer {
        for p in PARTS {
            let cols = if p == "ffn_down" { SPEC.ff } else { SPEC.c };
            let v = (0..cols)
                .map(|j| if j % 4 == 0 { 1000.0 } else { 1.0 })
                .collect();
            im.entries.insert(format!("blk.{l}.{p}.weight"), v);
        }
    }
    let mut o = QuantizeOptions::new(FileType::Q4_0);
    o.mix.pure = true;
    let plain = GgufFile::from_bytes(to_bytes(quantize_with(&file, &o).unwrap())).unwrap();
    o.imatrix = Some(im.clone());
    let guided = GgufFile::from_bytes(to_bytes(quantize_with(&file, &o).unwrap())).unwrap();
    let name = "blk.0.ffn_up.weight";
    let x = w.get(name).unwrap();
    let err = |f: &GgufFile| {
        let t = f.tensor(name).unwrap();
        assert_eq!(t.ty, GgmlType::Q4_0);
        let mut y = vec![0f32; x.len()];
        dequantize(t.ty, f.tensor_data(t), &mut y).unwrap();
        let (mut hot, mut cold) = (0f64, 0f64);
        for (j, (a, b)) in x.iter().zip(&y).enumerate() {
            let e = ((a - b) as f64).powi(2);
            if j % 4 == 0 {
                hot += e
            } else {
                cold += e
            }
        }
        (hot, cold)
    };
    let ((hot0, cold0), (hot1, cold1)) = (err(&plain), err(&guided));
    assert!(
        hot1 < 0.8 * hot0,
        "important columns: {hot1} with vs {hot0} without"
    );
    assert!(cold1 > cold0, "the rest pays for it: {cold1} vs {cold0}");
    // each row is tinynn's quantize_row under the entry
    let t = guided.tensor(name).unwrap();
    let mut row = vec![0u8; GgmlType::Q4_0.row_bytes(SPEC.c as u64).unwrap() as usize];
    quantize_row(
        GgmlType::Q4_0,
        &x[..SPEC.c],
        &mut row,
        Some(&im.entries[name]),
    )
    .unwrap();
    assert_eq!(&guided.tensor_data(t)[..row.len()], &row[..]);
}

fn to_bytes(w: toy::gguf::GgufWriter) -> Vec<u8> {
    let mut b = Vec::new();
    w.write_to(&mut b).unwrap();
    b
}

#[test]
fn an_imatrix_written_by_gguf_py_reads_per_matrix_counts() {
    // fuzz/seeds/imatrix/small.gguf: written by llama.cpp's gguf-py; ffn_down holds two
    // matrices (experts), the second never used (count 0: weights of 1, as llama-quantize)
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../fuzz/seeds/imatrix/small.gguf"
    );
    let m = Imatrix::read(std::path::Path::new(path)).unwrap();
    let q: Vec<f32> = (0..8).map(|i| i as f32 / 32.0).collect();
    assert_eq!(m.entries["blk.0.attn_q.weight"], q);
    let third = 1.0f32 / 3.0;
    assert_eq!(
        m.entries["blk.0.ffn_down.weight"],
        [[third; 4], [1.0; 4]].concat()
    );
    assert_eq!((m.chunks, m.datasets), (2, vec!["calib.txt".to_string()]));
    let err = Imatrix::from_bytes(b"GGUF\x03\0\0\0".to_vec()).unwrap_err();
    assert!(!err.is_empty());
}
