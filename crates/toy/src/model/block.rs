//! A block's cached inference pass, for every family: the operations of its `ops::BlockDef`,
//! in order, over the spans of a batch. Everything but attention and the recurrence runs on
//! all T rows at once, so several sequences share one pass over the weights (toy's quantized
//! kernels, two-plane activations, AMX where there is one); attention and the Gated DeltaNet
//! run per span on that span's cache (f16 K/V, recurrent state). Each row adds its own
//! adapters of `lora` after each product. Letters: T tokens in the batch, C width, H / Hkv
//! heads, D head size, F MLP width, W = 2 Hk Dk + Hv Dv, VW = Hv Dv.

use super::kv_cache::{f16_attention, round_queries};
use super::lora::{RowLoras, Target};
use super::ops::{Act, BlockDef, NormKind, Op};
use super::tap::{tap, POINTS};
use super::weights::{Linear, Loader};
use super::{Config, ModelError, Span, State};
use tinynn::kernels::act::{gelu, swiglu};
use tinynn::kernels::attention::{causal_attention, AttnShape};
use tinynn::kernels::norm::{layernorm, rmsnorm, rmsnorm_inplace};
use tinynn::kernels::rope::Rope;
use tinynn::layers::gdn::{self, GdnParams};

/// A norm's weight and (LayerNorm) bias (C).
pub struct NormW {
    pub w: Vec<f32>,
    pub b: Option<Vec<f32>>,
}

impl NormW {
    /// x (T, C) -> out (T, C).
    pub fn forward(&self, x: &[f32], eps: f32, out: &mut [f32]) {
        match &self.b {
            None => rmsnorm(x, &self.w, eps, out),
            Some(b) => layernorm(x, &self.w, b, eps, out),
        }
    }
}

/// The Gated DeltaNet core's own tensors.
struct GdnW {
    /// (W, K), GGUF `ssm_conv1d` of ne [K, W].
    conv_w: Vec<f32>,
    dt_bias: Vec<f32>,
    /// -exp(A_log) per value head.
    ssm_a: Vec<f32>,
    ssm_norm: Vec<f32>,
}

/// One block's weights, held for its ops.
pub struct Block {
    def: BlockDef,
    /// The weights of the Norm ops, in op order.
    norms: Vec<NormW>,
    /// The Residual ops' post-norm weights (C), in op order, where the family has them.
    posts: Vec<Vec<f32>>,
    /// The table's products, each its matrices and their adapter targets.
    products: Vec<Vec<(Linear, Target)>>,
    /// QkNorm's per-head weights (D) of q and k.
    qk_norm: Option<[Vec<f32>; 2]>,
    gdn: Option<GdnW>,
}

impl Block {
    /// Block `l` of a model of `cfg`, by its table's names and dims.
    pub fn load(f: &Loader, cfg: &Config, l: usize) -> Result<Self, ModelError> {
        let t = cfg.block_table(l);
        let def = BlockDef::new(cfg.arch, cfg.kinds[l]);
        let mut norms = Vec::new();
        for op in &def.ops {
            if let Op::Norm { name } = *op {
                let w = t.vector(f, &format!("{name}.weight"))?;
                let b = match def.norm {
                    NormKind::Layer => Some(t.vector(f, &format!("{name}.bias"))?),
                    NormKind::Rms => None,
                };
                norms.push(NormW { w, b });
            }
        }
        let mut posts = Vec::new();
        for op in &def.ops {
            if let Op::Residual {
                post: Some(name), ..
            } = *op
            {
                posts.push(t.vector(f, &format!("{name}.weight"))?);
            }
        }
        let products = t
            .products()
            .iter()
            .map(|parts| {
                parts
                    .iter()
                    .map(|p| {
                        let target = Target::of(p.name).expect("every block matrix is a target");
                        Ok((t.linear(f, p.name)?, target))
                    })
                    .collect::<Result<Vec<_>, ModelError>>()
            })
            .collect::<Result<Vec<_>, _>>()?;
        let qk_norm = match def.ops.contains(&Op::QkNorm) {
            true => Some([
                t.vector(f, "attn_q_norm.weight")?,
                t.vector(f, "attn_k_norm.weight")?,
            ]),
            false => None,
        };
        let gdn = match def.ops.contains(&Op::DeltaNet) {
            true => Some(GdnW {
                conv_w: t.vector(f, "ssm_conv1d.weight")?,
                dt_bias: t.vector(f, "ssm_dt.bias")?,
                ssm_a: t.vector(f, "ssm_a")?,
                ssm_norm: t.vector(f, "ssm_norm.weight")?,
            }),
            false => None,
        };
        Ok(Self {
            def,
            norms,
            posts,
            products,
            qk_norm,
            gdn,
        })
    }

    /// Product `p`'s one matrix.
    fn single(&self, p: usize) -> &(Linear, Target) {
        &self.products[p][0]
    }

    /// Run the block as layer `l` on s.x (T, C): the rows are the spans' tokens one span
    /// after another, each span a run of consecutive positions of one sequence.
    #[allow(clippy::too_many_arguments)]
    pub fn forward(
        &self,
        file: &[u8],
        cfg: &Config,
        rope: Option<&Rope>,
        s: &mut State,
        l: usize,
        spans: &mut [Span],
        lora: &RowLoras,
    ) {
        let t: usize = spans.iter().map(|sp| sp.len).sum();
        let (c, qd, kvd, ff) = (cfg.d_model, cfg.q_dim(), cfg.kv_dim(), cfg.d_ff);
        let mut norms = self.norms.iter();
        let mut posts = self.posts.iter();
        for (i, op) in self.def.ops.iter().enumerate() {
            match *op {
                Op::Norm { name } => {
                    let w = norms.next().expect("a weight per Norm op");
                    w.forward(&s.x[..t * c], cfg.norm_eps, &mut s.h[..t * c]);
                    if POINTS.contains(&name) {
                        tap(&mut s.taps, l, name, &s.h[..t * c], c);
                    }
                }
                Op::Qkv { p, gated } => self.qkv(file, cfg, s, l, t, p, gated, lora),
                Op::QkNorm => {
                    let [wq, wk] = self.qk_norm.as_ref().expect("QkNorm has its weights");
                    rmsnorm_inplace(&mut s.q[..t * qd], wq, cfg.norm_eps);
                    rmsnorm_inplace(&mut s.k[..t * kvd], wk, cfg.norm_eps);
                }
                Op::Rope => {
                    let rope = rope.expect("a family with RoPE has its table");
                    rope_spans(cfg, rope, &mut s.q, &mut s.k, spans);
                }
                Op::Attention => {
                    let (q, k, v) = (&mut s.q[..t * qd], &s.k[..t * kvd], &s.v[..t * kvd]);
                    attend_spans(cfg, l, q, k, v, spans, &mut s.att[..t * qd]);
                }
                Op::Gate => {
                    for (a, g) in s.att[..t * qd].iter_mut().zip(&s.qg[..t * qd]) {
                        *a *= 1.0 / (1.0 + (-g).exp());
                    }
                }
                Op::GdnIn { p } => self.gdn_in(file, cfg, s, l, t, p, lora),
                Op::DeltaNet => {
                    self.delta_net(cfg, s, l, t, spans);
                }
                Op::MlpIn { p } => {
                    let h = &s.h[..t * c];
                    let (a, b) = (&mut s.ff_a[..t * ff], &mut s.ff_b[..t * ff]);
                    match &self.products[p][..] {
                        [(up, target)] => {
                            up.forward(file, h, t, a);
                            lora.apply(l, *target, h, a);
                        }
                        [(gate, tg), (up, tu)] => {
                            Linear::forward_many(&[gate, up], file, h, t, &mut [&mut *a, &mut *b]);
                            lora.apply(l, *tg, h, a);
                            lora.apply(l, *tu, h, b);
                        }
                        _ => unreachable!("an MLP's input is up or gate|up"),
                    }
                }
                Op::Act(act) => {
                    let a = &mut s.ff_a[..t * ff];
                    match act {
                        Act::SwiGlu => swiglu(a, &s.ff_b[..t * ff]),
                        Act::Gelu => gelu(a),
                        Act::GeGlu => {
                            gelu(a);
                            a.iter_mut()
                                .zip(&s.ff_b[..t * ff])
                                .for_each(|(g, u)| *g *= u);
                        }
                    }
                }
                Op::Residual {
                    p,
                    tap: point,
                    post,
                } => {
                    // the output of the op before it
                    let input = match self.def.ops[i - 1] {
                        Op::Attention | Op::Gate => &s.att[..t * qd],
                        Op::DeltaNet => &s.gdn_out[..t * cfg.gdn.map_or(0, |g| g.value_width())],
                        Op::Act(_) => &s.ff_a[..t * ff],
                        _ => unreachable!(
                            "a Residual follows attention, its gate, the GDN or the MLP"
                        ),
                    };
                    let (w, target) = self.single(p);
                    let proj = &mut s.proj[..t * c];
                    w.forward(file, input, t, proj);
                    lora.apply(l, *target, input, proj);
                    if post.is_some() {
                        let w = posts.next().expect("a weight per post-norm");
                        rmsnorm_inplace(proj, w, cfg.norm_eps);
                    }
                    tap(&mut s.taps, l, point, proj, c);
                    let x = &mut s.x[..t * c];
                    x.iter_mut().zip(proj.iter()).for_each(|(a, b)| *a += b);
                }
            }
        }
        tap(&mut s.taps, l, "resid", &s.x[..t * c], c);
    }

    /// s.h (T, C) -> s.q (T, H*D), s.k and s.v (T, Hkv*D); a gated query's gate (T, H*D) at
    /// the front of s.qg.
    #[allow(clippy::too_many_arguments)]
    fn qkv(
        &self,
        file: &[u8],
        cfg: &Config,
        s: &mut State,
        l: usize,
        t: usize,
        p: usize,
        gated: bool,
        lora: &RowLoras,
    ) {
        let (c, qd, kvd, d) = (cfg.d_model, cfg.q_dim(), cfg.kv_dim(), cfg.head_dim);
        let h = &s.h[..t * c];
        match (&self.products[p][..], gated) {
            ([(qkv, target)], _) => {
                // one matrix: (T, C) -> (T, H*D + 2 Hkv*D), split into q, k, v
                let w = qd + 2 * kvd;
                let out = &mut s.qkv[..t * w];
                qkv.forward(file, h, t, out);
                lora.apply(l, *target, h, out);
                for i in 0..t {
                    let row = &out[i * w..(i + 1) * w];
                    s.q[i * qd..(i + 1) * qd].copy_from_slice(&row[..qd]);
                    s.k[i * kvd..(i + 1) * kvd].copy_from_slice(&row[qd..qd + kvd]);
                    s.v[i * kvd..(i + 1) * kvd].copy_from_slice(&row[qd + kvd..]);
                }
            }
            ([(wq, tq), (wk, tk), (wv, tv)], false) => {
                let (q, k, v) = (&mut s.q[..t * qd], &mut s.k[..t * kvd], &mut s.v[..t * kvd]);
                Linear::forward_many(&[wq, wk, wv], file, h, t, &mut [&mut *q, &mut *k, &mut *v]);
                lora.apply(l, *tq, h, q);
                lora.apply(l, *tk, h, k);
                lora.apply(l, *tv, h, v);
            }
            ([(wq, tq), (wk, tk), (wv, tv)], true) => {
                // (T, C) -> (T, H*2D) query and gate, interleaved per head
                let (qg, k, v) = (
                    &mut s.qg[..2 * t * qd],
                    &mut s.k[..t * kvd],
                    &mut s.v[..t * kvd],
                );
                Linear::forward_many(&[wq, wk, wv], file, h, t, &mut [&mut *qg, &mut *k, &mut *v]);
                lora.apply(l, *tq, h, qg);
                lora.apply(l, *tk, h, k);
                lora.apply(l, *tv, h, v);
                // split per head: q to s.q, the gate packed into the front of qg
                let q = &mut s.q[..t * qd];
                for r in 0..t * cfg.n_head {
                    q[r * d..(r + 1) * d].copy_from_slice(&qg[2 * r * d..(2 * r + 1) * d]);
                    qg.copy_within((2 * r + 1) * d..(2 * r + 2) * d, r * d);
                }
            }
            _ => unreachable!("attention's input is attn_qkv or attn_q|attn_k|attn_v"),
        }
    }

    /// s.h (T, C) -> the GDN inputs qkv (T, W), z (T, VW), beta and alpha (T, Hv).
    #[allow(clippy::too_many_arguments)]
    fn gdn_in(
        &self,
        file: &[u8],
        cfg: &Config,
        s: &mut State,
        l: usize,
        t: usize,
        p: usize,
        lora: &RowLoras,
    ) {
        let sh = cfg.gdn.expect("a GDN layer has a GDN shape");
        let (c, w, vw, hv) = (cfg.d_model, sh.conv_channels(), sh.value_width(), sh.hv);
        let (qkv, z) = (&mut s.gdn_qkv[..t * w], &mut s.gdn_z[..t * vw]);
        let (b, a) = (&mut s.gdn_b[..t * hv], &mut s.gdn_a[..t * hv]);
        let [(wqkv, t0), (wz, t1), (wb, t2), (wa, t3)] = [0, 1, 2, 3].map(|i| self.single(p + i));
        let h = &s.h[..t * c];
        let mut outs = [&mut *qkv, &mut *z, &mut *b, &mut *a];
        Linear::forward_many(&[wqkv, wz, wb, wa], file, h, t, &mut outs);
        for (target, y) in [t0, t1, t2, t3].into_iter().zip(outs) {
            lora.apply(l, *target, h, y);
        }
    }

    /// The GDN core per span, each continuing its cache's recurrent state -> s.gdn_out.
    fn delta_net(&self, cfg: &Config, s: &mut State, l: usize, t: usize, spans: &mut [Span]) {
        let sh = cfg.gdn.expect("a GDN layer has a GDN shape");
        let g = self.gdn.as_ref().expect("DeltaNet has its weights");
        let (w, vw, hv) = (sh.conv_channels(), sh.value_width(), sh.hv);
        let p = GdnParams {
            conv_w: &g.conv_w,
            dt_bias: &g.dt_bias,
            ssm_a: &g.ssm_a,
            norm_w: &g.ssm_norm,
        };
        let out = &mut s.gdn_out[..t * vw];
        let mut r0 = 0;
        for sp in spans.iter_mut() {
            let rows = |x: usize| r0 * x..(r0 + sp.len) * x;
            let (qkv, z) = (&s.gdn_qkv[rows(w)], &s.gdn_z[rows(vw)]);
            let (b, a) = (&s.gdn_b[rows(hv)], &s.gdn_a[rows(hv)]);
            let state = sp.cache.recurrent(l);
            gdn::forward(&sh, p, qkv, z, b, a, state, &mut out[rows(vw)]);
            r0 += sp.len;
        }
        if s.taps.is_some() {
            // the Frobenius norm of each value head's state (Hv, Dk, Dv), a row per sequence
            let norms: Vec<f32> = spans
                .iter_mut()
                .flat_map(|sp| {
                    let st = &sp.cache.recurrent(l).s;
                    st[..sh.ssm_state_len()]
                        .chunks_exact(sh.dk * sh.dv)
                        .map(|h| h.iter().map(|v| v * v).sum::<f32>().sqrt())
                        .collect::<Vec<_>>()
                })
                .collect();
            tap(&mut s.taps, l, "gdn_state", &norms, hv);
        }
    }
}

/// RoPE on q (T, H*D) and k (T, Hkv*D) at each span's positions.
fn rope_spans(cfg: &Config, rope: &Rope, q: &mut [f32], k: &mut [f32], spans: &[Span]) {
    let (qd, kvd, d) = (cfg.q_dim(), cfg.kv_dim(), cfg.head_dim);
    let t: usize = spans.iter().map(|sp| sp.len).sum();
    let (q, k) = (&mut q[..t * qd], &mut k[..t * kvd]);
    if let [sp] = spans {
        // one span (decode, a prompt): positions without a table
        rope.apply_rows(q, qd, d, |r| sp.pos0 + r);
        rope.apply_rows(k, kvd, d, |r| sp.pos0 + r);
        return;
    }
    let pos: Vec<usize> = spans
        .iter()
        .flat_map(|sp| sp.pos0..sp.pos0 + sp.len)
        .collect();
    rope.apply_rows(q, qd, d, |r| pos[r]);
    rope.apply_rows(k, kvd, d, |r| pos[r]);
}

/// Causal attention of layer `l` for every span (over the last `window` positions on a
/// sliding-window layer): q (T, H*D), k and v (T, Hkv*D) in, k and v stored in the span's
/// cache, out (T, H*D).
fn attend_spans(
    cfg: &Config,
    l: usize,
    q: &mut [f32],
    k: &[f32],
    v: &[f32],
    spans: &mut [Span],
    out: &mut [f32],
) {
    let (qd, kvd, d) = (cfg.q_dim(), cfg.kv_dim(), cfg.head_dim);
    let mut r0 = 0;
    for sp in spans.iter_mut() {
        let (n, pos0) = (sp.len, sp.pos0);
        let rows = |w: usize| r0 * w..(r0 + n) * w;
        let q = &mut q[rows(qd)];
        sp.cache.store(l, pos0, &k[rows(kvd)], &v[rows(kvd)]);
        if f16_attention(n) {
            round_queries(q);
        }
        let kv = sp.cache.kv(l);
        let shape = AttnShape {
            n_head: cfg.n_head,
            n_kv_head: cfg.n_kv_head,
            head_dim: d,
            ctx: kv.slots,
            f16_accumulate: f16_attention(n),
            window: cfg.swa.as_ref().filter(|w| w.layers[l]).map(|w| w.window),
        };
        // a window cache holds positions from `base`: the kernel sees them from slot 0
        causal_attention(q, kv.k, kv.v, shape, pos0 - kv.base, &mut out[rows(qd)]);
        r0 += n;
    }
}
