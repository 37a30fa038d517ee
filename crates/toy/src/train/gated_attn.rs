//! The gated softmax attention of a qwen35 block, forward and backward, as llama.cpp's
//! `build_layer_attn` (`src/models/qwen35.cpp`; docs/qwen35.md): one product gives the query
//! and a sigmoid output gate interleaved per head ([q (D) | gate (D)] for each head), k and
//! v; q and k are RMS-normalised per head, RoPE turns the first R dims of each head in neox
//! pairs (i, i + R/2), causal attention, times sigmoid(gate), then `attn_output` added into
//! the residual stream. The neox rotation of the first R dims is tinynn's rope, built so
//! by the network (`RopeSpec`), the same one the other families' blocks call.
//! Letters: B sequences, T positions, N = B*T rows, C width, H / Hkv heads, D head size,
//! R rotated dims, S = (H + 2 Hkv) D, P = 2 H D + 2 Hkv D.

use super::hybrid_params::AttnRanges;
use super::lin::Lin;
use tinynn::layers::attention::Attention;
use tinynn::layers::linear::Linear;
use tinynn::layers::rmsnorm::RmsNorm;
use tinynn::layers::rope::RopeAt;

pub(crate) struct GatedAttn {
    h: usize,
    hkv: usize,
    d: usize,
    proj: Lin,
    attn: Attention,
    output: Lin,
    /// RMSNorm over one head (D).
    head_norm: RmsNorm,
    /// Keys and values rounded to f16 (`ModelConfig::inference_rounding`).
    inference_rounding: bool,
}

/// One layer's forward values for N rows.
pub(crate) struct AttnActs {
    /// (N, P) the joint projection; (N, H D) / (N, Hkv D) q and k before their norms and
    /// after (contiguous per head), with their rstds (N H) / (N Hkv).
    proj: Vec<f32>,
    q: Vec<f32>,
    k: Vec<f32>,
    qn: Vec<f32>,
    kn: Vec<f32>,
    rstd_q: Vec<f32>,
    rstd_k: Vec<f32>,
    /// (N, S) attention's input after RoPE; its output (N, H D), lse (B, H, T).
    qkv: Vec<f32>,
    att: Vec<f32>,
    lse: Vec<f32>,
    /// (N, H D) the gate's logits, and att * sigmoid(gate) (attn_output's input).
    gate: Vec<f32>,
    y: Vec<f32>,
    /// The LoRA intermediates of the projection and the output (empty without adapters).
    u: [Vec<f32>; 2],
}

/// Backward buffers shared by the attention layers.
pub(crate) struct AttnScratch {
    /// (N, H D) d y, then d att; (N, S) d qkv; d q / d k normed and raw; (N, P) d proj.
    dy: Vec<f32>,
    dqkv: Vec<f32>,
    dqn: Vec<f32>,
    dkn: Vec<f32>,
    dq: Vec<f32>,
    dk: Vec<f32>,
    dproj: Vec<f32>,
}

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

impl GatedAttn {
    pub fn new(
        c: usize,
        h: usize,
        hkv: usize,
        d: usize,
        eps: f32,
        inference_rounding: bool,
    ) -> Self {
        Self {
            inference_rounding,
            h,
            hkv,
            d,
            proj: Lin::Dense(Linear::new(c, 2 * h * d + 2 * hkv * d)),
            attn: Attention::new(h, hkv, d),
            output: Lin::Dense(Linear::new(h * d, c)),
            head_norm: RmsNorm::new(d, eps),
        }
    }

    /// The products as frozen base matrices with adapters (a LoRA run): attn_q|attn_k|attn_v
    /// and attn_output.
    pub fn freeze(&mut self, [proj, output]: [Lin; 2]) {
        (self.proj, self.output) = (proj, output);
    }

    pub fn acts(&self, b: usize, t: usize) -> AttnActs {
        let n = b * t;
        let (q, kv) = (self.h * self.d, self.hkv * self.d);
        let z = |k: usize| vec![0f32; k];
        AttnActs {
            proj: z(n * self.proj.n_out()),
            q: z(n * q),
            k: z(n * kv),
            qn: z(n * q),
            kn: z(n * kv),
            rstd_q: z(n * self.h),
            rstd_k: z(n * self.hkv),
            qkv: z(n * self.attn.qkv_width()),
            att: z(n * q),
            lse: z(b * self.h * t),
            gate: z(n * q),
            y: z(n * q),
            u: [&self.proj, &self.output].map(|l| z(n * l.u_width())),
        }
    }

    pub fn scratch(&self, n: usize) -> AttnScratch {
        let (q, kv) = (self.h * self.d, self.hkv * self.d);
        let z = |k: usize| vec![0f32; k];
        AttnScratch {
            dy: z(n * q),
            dqkv: z(n * self.attn.qkv_width()),
            dqn: z(n * q),
            dkn: z(n * kv),
            dq: z(n * q),
            dk: z(n * kv),
            dproj: z(n * self.proj.n_out()),
        }
    }

    /// h (N, C) -> out (N, C) += attn_output(attention(...) * sigmoid(gate)).
    #[allow(clippy::too_many_arguments)]
    pub fn forward(
        &self,
        p: &[f32],
        r: &AttnRanges,
        h: &[f32],
        a: &mut AttnActs,
        out: &mut [f32],
        rope: RopeAt,
        b: usize,
        t: usize,
    ) {
        let (n, d) = (b * t, self.d);
        let (q, kv, s, pw) = (
            self.h * d,
            self.hkv * d,
            self.attn.qkv_width(),
            self.proj.n_out(),
        );
        // (N, C) -> (N, P)
        let [u0, u1] = &mut a.u;
        self.proj
            .forward(p, &r.qkv, &None, h, &mut a.proj, u0, n, false, None);
        // split: q heads and gate heads out of their interleaving, k
        for i in 0..n {
            let row = &a.proj[i * pw..(i + 1) * pw];
            for hh in 0..self.h {
                let (dst, src) = (i * q + hh * d, 2 * hh * d);
                a.q[dst..dst + d].copy_from_slice(&row[src..src + d]);
                a.gate[dst..dst + d].copy_from_slice(&row[src + d..src + 2 * d]);
            }
            a.k[i * kv..(i + 1) * kv].copy_from_slice(&row[2 * q..2 * q + kv]);
        }
        // (N H, D) and (N Hkv, D) rows, each head normalised on its own
        let w_qn = &p[r.q_norm.clone()];
        let w_kn = &p[r.k_norm.clone()];
        self.head_norm
            .forward(&a.q, w_qn, 1.0, &mut a.qn, &mut a.rstd_q, n * self.h);
        self.head_norm
            .forward(&a.k, w_kn, 1.0, &mut a.kn, &mut a.rstd_k, n * self.hkv);
        // (N, S) = [q | k | v] per row
        for i in 0..n {
            let row = &mut a.qkv[i * s..(i + 1) * s];
            row[..q].copy_from_slice(&a.qn[i * q..(i + 1) * q]);
            row[q..q + kv].copy_from_slice(&a.kn[i * kv..(i + 1) * kv]);
            row[q + kv..].copy_from_slice(&a.proj[i * pw + 2 * q + kv..(i + 1) * pw]);
        }
        let heads = self.h + self.hkv;
        rope.forward(&mut a.qkv, s, heads, t, n);
        if self.inference_rounding {
            self.attn.round_kv_f16(&mut a.qkv, n);
        }
        // (N, S) -> (N, H D)
        self.attn
            .forward_packed(&a.qkv, &mut a.att, &mut a.lse, b, t, rope.pos);
        for ((y, x), g) in a.y[..n * q].iter_mut().zip(&a.att).zip(&a.gate) {
            *y = x * sigmoid(*g);
        }
        // (N, H D) -> (N, C), added into the residual stream
        self.output
            .forward(p, &r.output, &None, &a.y, out, u1, n, true, None);
    }

    /// From dres (N, C): dh (N, C) overwritten with the gradient of h; parameter gradients
    /// added into g.
    #[allow(clippy::too_many_arguments)]
    pub fn backward(
        &self,
        p: &[f32],
        g: &mut [f32],
        r: &AttnRanges,
        h: &[f32],
        a: &AttnActs,
        s: &mut AttnScratch,
        dres: &[f32],
        dh: &mut [f32],
        rope: RopeAt,
        b: usize,
        t: usize,
    ) {
        let (n, d) = (b * t, self.d);
        let (q, kv, sw, pw) = (
            self.h * d,
            self.hkv * d,
            self.attn.qkv_width(),
            self.proj.n_out(),
        );
        // (N, C) -> (N, H D)
        let (dy, u1) = (Some(&mut s.dy[..]), &a.u[1]);
        self.output
            .backward(p, g, &r.output, &None, dres, &a.y, u1, dy, false, n, None);
        // y = att * sig(gate): d gate into its slots of dproj, d att in place of d y
        for i in 0..n {
            for hh in 0..self.h {
                let (at, dst) = (i * q + hh * d, i * pw + (2 * hh + 1) * d);
                for j in 0..d {
                    let (dy, sg) = (s.dy[at + j], sigmoid(a.gate[at + j]));
                    s.dproj[dst + j] = dy * a.att[at + j] * sg * (1.0 - sg);
                    s.dy[at + j] = dy * sg;
                }
            }
        }
        // (N, H D) -> (N, S), then back through RoPE
        self.attn
            .backward_packed(&s.dy, &a.qkv, &a.att, &a.lse, &mut s.dqkv, b, t, rope.pos);
        let heads = self.h + self.hkv;
        rope.backward(&mut s.dqkv, sw, heads, t, n);
        for i in 0..n {
            let row = &s.dqkv[i * sw..(i + 1) * sw];
            s.dqn[i * q..(i + 1) * q].copy_from_slice(&row[..q]);
            s.dkn[i * kv..(i + 1) * kv].copy_from_slice(&row[q..q + kv]);
            s.dproj[i * pw + 2 * q + kv..(i + 1) * pw].copy_from_slice(&row[q + kv..]);
        }
        // the per-head norms (their backward adds into dq / dk)
        s.dq[..n * q].fill(0.0);
        s.dk[..n * kv].fill(0.0);
        let (w_qn, w_kn) = (&p[r.q_norm.clone()], &p[r.k_norm.clone()]);
        let g_qn = &mut g[r.q_norm.clone()];
        let nq = n * self.h;
        self.head_norm
            .backward(&s.dqn, &a.q, w_qn, 1.0, &a.rstd_q, &mut s.dq, g_qn, nq);
        let g_kn = &mut g[r.k_norm.clone()];
        let nk = n * self.hkv;
        self.head_norm
            .backward(&s.dkn, &a.k, w_kn, 1.0, &a.rstd_k, &mut s.dk, g_kn, nk);
        for i in 0..n {
            let row = &mut s.dproj[i * pw..(i + 1) * pw];
            for hh in 0..self.h {
                let (src, dst) = (i * q + hh * d, 2 * hh * d);
                row[dst..dst + d].copy_from_slice(&s.dq[src..src + d]);
            }
            row[2 * q..2 * q + kv].copy_from_slice(&s.dk[i * kv..(i + 1) * kv]);
        }
        // (N, P) -> (N, C)
        self.proj.backward(
            p,
            g,
            &r.qkv,
            &None,
            &s.dproj,
            h,
            &a.u[0],
            Some(dh),
            false,
            n,
            None,
        );
    }
}
