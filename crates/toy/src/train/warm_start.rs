//! Warm start: a llama student of another width or depth, started from a donor GGUF.
//!
//! - **Wider** (C' = k C, same head size D): HyperCloning (Samragh et al. 2024, "Scaling
//!   Smart: Accelerating Large Language Model Pre-training with Small Model Initialization",
//!   arXiv 2409.12903), a Net2Net-style (Chen et al. 2016, arXiv 1511.05641) function-
//!   preserving widening. The residual stream is tiled, h' = [h, ..., h] (k copies), and
//!   RMS([h, h]) = RMS(h), so tiled norm weights give tiled normalised inputs. Every unit of
//!   an axis the student widens (heads of q, heads of k/v, MLP neurons, residual dims) copies
//!   a donor unit: a matrix's output rows are copied as they are; its input columns are
//!   copied divided by how many copies their donor unit has, so the sum over the copies is
//!   the donor's product. Heads are copied whole (D rows), so attention and RoPE see the
//!   donor's vectors exactly. The copies of an input column get zero-sum noise (per output
//!   row), which keeps the function in real arithmetic but breaks the symmetry that would
//!   otherwise keep the copies identical for ever. The tied head reads the tiled embedding,
//!   so output_norm is divided by k instead. The student's logits at init are the donor's
//!   (up to float rounding) when C' = k C, H' = k H, Hkv' = k Hkv and F' >= F.
//! - **Deeper** (L' > L): the donor's blocks, then blocks whose attn_output and ffn_down are
//!   zero (the rest fresh), so each extra block is the identity at init.
//! - **Narrower** (C' < C): a projection P (C', C) onto the top C' principal directions of
//!   the donor's token embeddings (the uncentred second moment EᵀE, `pca.rs`), applied on
//!   the residual side of every matrix (W Pᵀ for readers, P W for writers), with each
//!   block's norm weights folded into the matrices that read it and the norms set to
//!   sqrt(C / C') (the RMS over C' projected dims of an energy-preserving projection is
//!   sqrt(C / C') times the donor's). The first H' heads, Hkv' kv heads and F' neurons are
//!   kept. Not function-preserving; a better start than a fresh init.
//!
//! Letters: V vocabulary, C / C' donor / student width, H heads, Hkv kv heads, D head size,
//! F MLP hidden size, L layers, k = C' / C.

use super::params::Layout;
use super::pca::top_directions;
use super::rng::SplitMix64;
use super::{Arch, ModelConfig, TrainError};
use crate::gguf::GgufFile;
use tinynn::layers::matmul::{matmul_dyw, matmul_xwt};

/// The symmetry-breaking noise on copied input columns, relative to the tensor's RMS.
const NOISE: f32 = 0.1;

fn bad(m: String) -> TrainError {
    TrainError::Base(format!("warm start: {m}"))
}

/// How the student's elements along one axis come from the donor's.
enum Axis {
    /// Element i of the student copies element src[i] of the donor, which has count[j]
    /// copies; groups[j] lists them.
    Copy {
        src: Vec<usize>,
        count: Vec<usize>,
        groups: Vec<Vec<usize>>,
    },
    /// x' = P x with P (rows, cols) row-major, orthonormal rows.
    Project {
        p: Vec<f32>,
        rows: usize,
        cols: usize,
    },
}

impl Axis {
    fn copy(src: Vec<usize>, n_donor: usize) -> Self {
        let mut groups = vec![Vec::new(); n_donor];
        for (i, &j) in src.iter().enumerate() {
            groups[j].push(i);
        }
        let count = groups.iter().map(|g| g.len().max(1)).collect();
        Axis::Copy { src, count, groups }
    }

    /// Units of `unit` elements: student unit u copies donor unit `unit_src(u)`.
    fn units(
        n_student: usize,
        n_donor: usize,
        unit: usize,
        unit_src: impl Fn(usize) -> usize,
    ) -> Self {
        let src = (0..n_student * unit)
            .map(|i| unit_src(i / unit) * unit + i % unit)
            .collect();
        Axis::copy(src, n_donor * unit)
    }

    fn identity(n: usize) -> Self {
        Axis::copy((0..n).collect(), n)
    }

    fn donor_len(&self) -> usize {
        match self {
            Axis::Copy { count, .. } => count.len(),
            Axis::Project { cols, .. } => *cols,
        }
    }

    fn student_len(&self) -> usize {
        match self {
            Axis::Copy { src, .. } => src.len(),
            Axis::Project { rows, .. } => *rows,
        }
    }
}

/// A donor matrix w (R, K) as the student's (R', K'): rows written along `rows` (copied,
/// or P w), columns read along `cols` (copied / count plus zero-sum noise of `sigma` over
/// each group of copies, or w Pᵀ), or written when `cols_write` (token_embd).
fn map_matrix(
    w: &[f32],
    rows: &Axis,
    cols: &Axis,
    cols_write: bool,
    sigma: f32,
    rng: &mut SplitMix64,
) -> Vec<f32> {
    let (r, k) = (rows.donor_len(), cols.donor_len());
    let (r2, k2) = (rows.student_len(), cols.student_len());
    // rows first: (R, K) -> (R', K)
    let w0 = match rows {
        Axis::Copy { src, .. } => src
            .iter()
            .flat_map(|&i| &w[i * k..(i + 1) * k])
            .copied()
            .collect(),
        Axis::Project { p, .. } => {
            let mut out = vec![0f32; r2 * k];
            matmul_dyw(&mut out, p, w, r2, k, r, false); // (R', R) (R, K)
            out
        }
    };
    // then columns: (R', K) -> (R', K')
    match cols {
        Axis::Project { p, .. } => {
            let mut out = vec![0f32; r2 * k2];
            matmul_xwt(&mut out, &w0, p, r2, k, k2, false); // (R', K) (K', K)ᵀ
            out
        }
        Axis::Copy { src, count, groups } => {
            let mut out = Vec::with_capacity(r2 * k2);
            for row in w0.chunks_exact(k) {
                let start = out.len();
                out.extend(src.iter().map(|&j| {
                    if cols_write {
                        row[j]
                    } else {
                        row[j] / count[j] as f32
                    }
                }));
                if cols_write || sigma == 0.0 {
                    continue;
                }
                let o = &mut out[start..];
                for g in groups.iter().filter(|g| g.len() > 1) {
                    let mut sum = 0.0;
                    for &i in &g[..g.len() - 1] {
                        let e = sigma * normal(rng);
                        o[i] += e;
                        sum += e;
                    }
                    o[g[g.len() - 1]] -= sum;
                }
            }
            out
        }
    }
}

/// w (R, K) with column j times g[j]: a norm weight folded into the matrix reading it.
fn fold_norm(w: &mut [f32], g: &[f32]) {
    for row in w.chunks_exact_mut(g.len()) {
        row.iter_mut().zip(g).for_each(|(x, s)| *x *= s);
    }
}

/// A standard normal (Box-Muller; u1 in (0, 1] keeps the log finite).
fn normal(rng: &mut SplitMix64) -> f32 {
    let (u1, u2) = (1.0 - rng.next_f64(), rng.next_f64());
    ((-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()) as f32
}

fn rms(w: &[f32]) -> f32 {
    (w.iter().map(|x| (x * x) as f64).sum::<f64>() / w.len().max(1) as f64).sqrt() as f32
}

/// The donor's config, read as the trainer's (llama only), with sequences of `ctx`.
pub fn donor_config(donor: &GgufFile, ctx: usize) -> Result<ModelConfig, TrainError> {
    super::base::config_from_gguf(donor, ctx).map_err(|e| match e {
        TrainError::Base(m) => bad(format!("the donor: {m}")),
        e => e,
    })
}

/// What a warm start from a donor of `d` to a student of `s` does, in words; an error for
/// a pair it cannot map.
pub fn describe(d: &ModelConfig, s: &ModelConfig) -> Result<String, TrainError> {
    let shape = |c: &ModelConfig| {
        format!(
            "vocab {} d_model {} heads {}/{} head size {} d_ff {} layers {}{}",
            c.vocab,
            c.d_model,
            c.n_head,
            c.n_kv_head,
            c.head_dim,
            c.d_ff,
            c.n_layer,
            if c.is_tied() { " tied" } else { "" }
        )
    };
    let both = || format!("donor ({}) vs student ({})", shape(d), shape(s));
    if s.arch != Arch::Llama || s.gdn.is_some() {
        return Err(bad(format!(
            "the student must be llama, not {}",
            s.arch.name()
        )));
    }
    if d.vocab != s.vocab || d.head_dim != s.head_dim {
        return Err(bad(format!("vocab and head size must match: {}", both())));
    }
    let wider = s.d_model > d.d_model;
    if wider && !s.d_model.is_multiple_of(d.d_model) {
        return Err(bad(format!(
            "a wider student needs d_model a multiple of the donor's: {}",
            both()
        )));
    }
    if s.n_layer < d.n_layer {
        return Err(bad(format!(
            "the student must have at least the donor's layers: {}",
            both()
        )));
    }
    if s.is_tied() && !d.is_tied() {
        return Err(bad(format!(
            "the donor's head is untied, the student ties it: {}",
            both()
        )));
    }
    let k = s.d_model / d.d_model;
    let width = match s.d_model.cmp(&d.d_model) {
        std::cmp::Ordering::Equal => "same width".to_string(),
        std::cmp::Ordering::Greater => format!("{k}x wider (HyperCloning)"),
        std::cmp::Ordering::Less => "narrower (embedding PCA projection)".to_string(),
    };
    let exact = s.d_model >= d.d_model
        && s.n_head == s.d_model / d.d_model * d.n_head
        && s.n_kv_head == s.d_model / d.d_model * d.n_kv_head
        && s.d_ff >= d.d_ff;
    Ok(format!(
        "{width}, {} extra identity blocks, {}: {}",
        s.n_layer - d.n_layer,
        if exact {
            "function-preserving"
        } else {
            "approximate"
        },
        both()
    ))
}

/// The student's flat params (laid out as `Layout::new(student)`) from `donor`: copied,
/// widened, narrowed and/or deepened as the module header says; the parts that are new
/// (extra blocks, symmetry-breaking noise) come from `seed`.
pub fn warm_start(
    donor: &GgufFile,
    student: &ModelConfig,
    seed: u64,
) -> Result<Vec<f32>, TrainError> {
    student.validate()?;
    let dc = donor_config(donor, student.ctx)?;
    describe(&dc, student)?;
    let dlay = Layout::new(&dc);
    let mut dp = vec![0f32; dlay.total];
    super::base::import(donor, &dlay, &mut dp)?;
    let dget = |name: &str| {
        let i = dlay.infos.iter().find(|i| i.name == name);
        i.map(|i| dp[i.range.clone()].to_vec())
    };

    let (c, c2, dd) = (dc.d_model, student.d_model, dc.head_dim);
    let resid = match c2.cmp(&c) {
        std::cmp::Ordering::Less => {
            let e = dget("token_embd.weight").unwrap_or_default(); // (V, C)
            Axis::Project {
                p: top_directions(&e, dc.vocab, c, c2),
                rows: c2,
                cols: c,
            }
        }
        _ => Axis::units(c2, c, 1, |i| i % c),
    };
    let project = matches!(resid, Axis::Project { .. });
    let (h, hkv, h2, hkv2) = (dc.n_head, dc.n_kv_head, student.n_head, student.n_kv_head);
    let q_ax = Axis::units(h2, h, dd, |j| j % h);
    // student kv head g serves q heads g r' ..; it copies the kv head of the first one's donor
    let (r, r2) = (h / hkv, h2 / hkv2);
    let kv_ax = Axis::units(hkv2, hkv, dd, |g| (g * r2 % h) / r);
    let f_ax = Axis::units(student.d_ff, dc.d_ff, 1, |n| n % dc.d_ff);
    let vocab = Axis::identity(dc.vocab);

    let slay = Layout::new(student);
    let mut params = slay.init(seed);
    let mut rng = SplitMix64::new(seed ^ 0x3A57_57A7);
    let norm_scale = (c as f32 / c2 as f32).sqrt();
    for info in &slay.infos {
        let name = info.name.as_str();
        let (blk, part) = match name.strip_prefix("blk.").and_then(|r| r.split_once('.')) {
            Some((l, p)) => (l.parse::<usize>().ok(), p),
            None => (None, name),
        };
        if blk.is_some_and(|l| l >= dc.n_layer) {
            // an extra block: fresh, but adds nothing to the residual stream at init
            if matches!(part, "attn_output.weight" | "ffn_down.weight") {
                params[info.range.clone()].fill(0.0);
            }
            continue;
        }
        let src_name = if name == "output.weight" && dc.is_tied() {
            "token_embd.weight"
        } else {
            name
        };
        let mut w = dget(src_name).ok_or_else(|| bad(format!("the donor has no {src_name}")))?;
        let norm_of = |p: &str| blk.map(|l| format!("blk.{l}.{p}")).and_then(|n| dget(&n));
        let (rows, cols, folded): (&Axis, &Axis, Option<Vec<f32>>) = match part {
            "token_embd.weight" => (&vocab, &resid, None),
            "output.weight" => (&vocab, &resid, dget("output_norm.weight")),
            "attn_q.weight" => (&q_ax, &resid, norm_of("attn_norm.weight")),
            "attn_k.weight" | "attn_v.weight" => (&kv_ax, &resid, norm_of("attn_norm.weight")),
            "attn_output.weight" => (&resid, &q_ax, None),
            "ffn_gate.weight" | "ffn_up.weight" => (&f_ax, &resid, norm_of("ffn_norm.weight")),
            "ffn_down.weight" => (&resid, &f_ax, None),
            "attn_norm.weight" | "ffn_norm.weight" | "output_norm.weight" => {
                let out = map_norm(
                    &w,
                    &resid,
                    part == "output_norm.weight" && student.is_tied(),
                    norm_scale,
                );
                let f = super::export::depth_factor(student, name);
                params[info.range.clone()]
                    .iter_mut()
                    .zip(out)
                    .for_each(|(p, x)| *p = x / f);
                continue;
            }
            _ => return Err(bad(format!("no mapping for tensor {name}"))),
        };
        if let (true, Some(g)) = (project, folded) {
            fold_norm(&mut w, &g);
        }
        let sigma = NOISE * rms(&w) / (c2 / c).max(1) as f32;
        let out = map_matrix(&w, rows, cols, part == "token_embd.weight", sigma, &mut rng);
        params[info.range.clone()].copy_from_slice(&out);
    }
    Ok(params)
}

/// A norm weight g (C) as the student's: copied along the residual (divided by the copies
/// when `read`: the tied head reads the tiled embedding), or under a projection the constant
/// sqrt(C / C') (g is folded into the readers), times diag(P diag(g) Pᵀ) when `read`.
fn map_norm(g: &[f32], resid: &Axis, read: bool, scale: f32) -> Vec<f32> {
    match resid {
        Axis::Copy { src, count, .. } => src
            .iter()
            .map(|&j| if read { g[j] / count[j] as f32 } else { g[j] })
            .collect(),
        Axis::Project { p, rows, cols } => (0..*rows)
            .map(|i| {
                let pi = &p[i * cols..(i + 1) * cols];
                let d: f32 = if read {
                    pi.iter().zip(g).map(|(a, b)| a * a * b).sum()
                } else {
                    1.0
                };
                scale * d
            })
            .collect(),
    }
}
