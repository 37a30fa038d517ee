//! A padded SFT batch laid out again without its padding ("variable-length" batching, as
//! FlashAttention's `cu_seqlens` or packing with restarting position ids): each row's live
//! part (its tokens through its last trained target) becomes a sample of a packed row, with
//! positions from 0 and attention kept inside the sample (`TrainModel::forward_backward_packed`),
//! so every sample is computed exactly as in its padded row and the padding, which carries no
//! loss and, causally, changes nothing before it, is not computed at all.
//!
//! Samples go longest first to the least-filled row (LPT scheduling, Graham 1969), for every
//! row count up to the batch; the layout kept is the one with the fewest positions, counted as
//! the shards run them (each shard takes ceil(rows / shards) rows of the longest row's
//! length). Rows end with padding of their own (a sample without targets).
//!
//! Letters: B rows of T positions in, B' rows of T' positions out, T' <= ctx.

use super::sft::IGNORE;
use super::sft_batch::{count_from_zero, end_row};
use crate::train::TrainModel;

/// A batch laid out by [`repack`]: inputs, targets and positions (B', T').
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Packed {
    pub x: Vec<u32>,
    pub y: Vec<u32>,
    pub pos: Vec<u32>,
    pub b: usize,
    pub t: usize,
}

/// Rows of `b` x `t` inputs `x` and targets `y` with padding, packed into at most `max_rows`
/// rows of at most `ctx` run by `shards` shards; `None` when that would not run fewer
/// positions than the batch as it is.
pub fn repack(
    x: &[u32],
    y: &[u32],
    (b, t): (usize, usize),
    ctx: usize,
    max_rows: usize,
    shards: usize,
) -> Option<Packed> {
    assert!(
        x.len() >= b * t && y.len() >= b * t,
        "inputs and targets are (B, T)"
    );
    let shards = shards.max(1);
    let cost = |rows: usize, len: usize| rows.div_ceil(shards) * shards * len;
    // each row's live length; rows without a trained target drop out
    let mut live: Vec<(usize, usize)> = (0..b)
        .filter_map(|r| {
            let row = &y[r * t..(r + 1) * t];
            row.iter().rposition(|&v| v != IGNORE).map(|i| (r, i + 1))
        })
        .collect();
    if live.is_empty() {
        return None;
    }
    // longest first, ties in row order: the same layout every time
    live.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let mut best: Option<(usize, Vec<Vec<usize>>, usize)> = None;
    let mut best_cost = cost(b, t);
    for rows in 1..=max_rows.min(live.len()) {
        let (members, len) = schedule(&live, rows);
        if len <= ctx && cost(rows, len) < best_cost {
            best_cost = cost(rows, len);
            best = Some((rows, members, len));
        }
    }
    let (rows, members, len) = best?;
    let mut out = Packed {
        x: vec![0; rows * len],
        y: vec![IGNORE; rows * len],
        pos: vec![0; rows * len],
        b: rows,
        t: len,
    };
    let rows = (out.x.chunks_exact_mut(len))
        .zip(out.y.chunks_exact_mut(len))
        .zip(out.pos.chunks_exact_mut(len));
    for (samples, ((rx, ry), rp)) in members.iter().zip(rows) {
        let mut at = 0;
        for &i in samples {
            let (src, n) = live[i];
            let s = src * t..src * t + n;
            rx[at..at + n].copy_from_slice(&x[s.clone()]);
            ry[at..at + n].copy_from_slice(&y[s]);
            count_from_zero(&mut rp[at..at + n]);
            at += n;
        }
        end_row(rx, ry, rp, at);
    }
    Some(out)
}

/// [`repack`] for `model`'s shape (ctx, batch, shards), where it can pack (Llama family);
/// `None` where it cannot or packing would not run fewer positions.
pub fn repack_for(
    model: &TrainModel,
    x: &[u32],
    y: &[u32],
    (b, t): (usize, usize),
) -> Option<Packed> {
    model.check_packing().ok()?;
    repack(x, y, (b, t), model.cfg.ctx, model.batch(), model.n_shards())
}

/// LPT: each sample of `live` (longest first) to the least-filled of `rows` rows (the first
/// such); the indices into `live` per row and the fullest row's length.
fn schedule(live: &[(usize, usize)], rows: usize) -> (Vec<Vec<usize>>, usize) {
    let mut members = vec![Vec::new(); rows];
    let mut load = vec![0usize; rows];
    for (i, &(_, n)) in live.iter().enumerate() {
        let r = (0..rows).min_by_key(|&r| (load[r], r)).expect("rows >= 1");
        members[r].push(i);
        load[r] += n;
    }
    (members, load.into_iter().max().unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A padded batch with rows of the given live lengths (targets on the second half of each).
    fn padded(lens: &[usize], t: usize) -> (Vec<u32>, Vec<u32>) {
        let b = lens.len();
        let (mut x, mut y) = (vec![7u32; b * t], vec![IGNORE; b * t]);
        for (r, &n) in lens.iter().enumerate() {
            for i in 0..n {
                x[r * t + i] = (1000 * r + i) as u32;
                if i >= n / 2 {
                    y[r * t + i] = (1000 * r + i + 1) as u32;
                }
            }
        }
        (x, y)
    }

    #[test]
    fn every_live_token_appears_once_with_its_target_and_position() {
        let lens = [90, 20, 61, 33, 75, 12, 48, 5];
        let t = 90;
        let (x, y) = padded(&lens, t);
        let p = repack(&x, &y, (8, t), 256, 8, 2).expect("fewer positions");
        assert_eq!(p.b % 2, 0, "rows split evenly over two shards");
        assert!(p.t <= 256 && p.b * p.t < 8 * t, "{} x {}", p.b, p.t);
        let live: usize = lens.iter().sum();
        assert!(
            p.b * p.t <= live + live / 8,
            "little padding: {} x {}",
            p.b,
            p.t
        );
        for (r, &n) in lens.iter().enumerate() {
            let start =
                p.x.iter()
                    .position(|&v| v == (1000 * r) as u32)
                    .expect("sample placed");
            for i in 0..n {
                assert_eq!(p.x[start + i], (1000 * r + i) as u32);
                assert_eq!(p.pos[start + i], i as u32);
                assert_eq!(p.y[start + i], y[r * t + i]);
            }
            assert_eq!(p.x.iter().filter(|&&v| v == (1000 * r) as u32).count(), 1);
        }
        let trained = |v: &[u32]| v.iter().filter(|&&v| v != IGNORE).count();
        assert_eq!(trained(&p.y), trained(&y));
    }

    #[test]
    fn a_batch_without_padding_stays_as_it_is() {
        let (x, y) = padded(&[40, 40, 40, 40], 40);
        assert_eq!(repack(&x, &y, (4, 40), 256, 4, 2), None);
        // nor does one whose rows cannot share a context
        let (x, y) = padded(&[200, 180, 190, 150], 200);
        assert_eq!(repack(&x, &y, (4, 200), 256, 4, 2), None);
    }

    #[test]
    fn rows_without_targets_drop_out_and_rows_stay_within_ctx() {
        let lens = [64usize, 64, 0, 30, 30, 64];
        let (x, y) = padded(&lens, 64);
        let p = repack(&x, &y, (6, 64), 128, 6, 2).expect("fewer positions");
        assert!(p.t <= 128, "rows within ctx: {}", p.t);
        assert_eq!(p.b * p.t, 256, "252 live positions in two shards' rows");
        assert_eq!(
            p.y.iter().filter(|&&v| v != IGNORE).count(),
            3 * 32 + 2 * 15
        );
    }

    #[test]
    fn a_repacked_batch_trains_as_its_padded_rows() {
        use crate::train::{Arch, ModelConfig, ModelSpec, TrainModel};
        let cfg = ModelConfig::try_from(ModelSpec {
            arch: Arch::Llama,
            vocab: 29,
            d_model: 16,
            n_head: 4,
            n_kv_head: 2,
            d_ff: 24,
            n_layer: 2,
            ctx: 24,
            norm_eps: 1e-5,
            rope_base: 100.0,
            depth_scale: false,
            tied: true,
            hybrid: None,
            head_dim: None,
            rope_freqs: None,
            ctx_train: None,
            inference_rounding: false,
            swa: None,
        })
        .expect("a valid config");
        let (b, t) = (6, 12);
        let lens = [12usize, 3, 7, 0, 9, 5];
        let (mut x, y) = padded(&lens, t);
        x.iter_mut().for_each(|v| *v %= 29);
        let y: Vec<u32> = y
            .iter()
            .map(|&v| if v == IGNORE { v } else { v % 29 })
            .collect();
        let mut m = TrainModel::init(cfg, b, 3);
        assert_eq!(m.n_shards(), 2);
        let p = repack(&x, &y, (b, t), 24, b, m.n_shards()).expect("fewer positions");
        assert!(p.b * p.t < b * t);
        let (eval_padded, eval_packed) = (
            m.forward_loss(&x, &y, b, t),
            m.forward_loss_packed(&p.x, &p.y, &p.pos, (p.b, p.t)),
        );
        assert!((eval_padded - eval_packed).abs() <= 1e-6 * eval_padded.abs());
        m.zero_grad();
        let padded_loss = m.forward_backward(&x, &y, b, t);
        let g = m.grads.clone();
        m.zero_grad();
        let packed_loss = m.forward_backward_packed(&p.x, &p.y, &p.pos, (p.b, p.t), 1.0);
        assert!(
            (padded_loss - packed_loss).abs() <= 1e-6 * padded_loss.abs(),
            "{padded_loss} vs {packed_loss}"
        );
        let scale = g.iter().fold(0f32, |a, v| a.max(v.abs()));
        assert!(scale > 0.0);
        for (i, (a, c)) in g.iter().zip(&m.grads).enumerate() {
            assert!((a - c).abs() <= 1e-5 * scale, "grad {i}: {a} vs {c}");
        }
    }
}
