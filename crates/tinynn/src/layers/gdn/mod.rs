//! The Gated DeltaNet mixer core (Yang, Kautz & Hatamizadeh, "Gated Delta Networks: Improving
//! Mamba2 with Delta Rule", arXiv 2412.06464), as Qwen3-Next / Qwen3.5 use it and llama.cpp's
//! `qwen35` graph runs it. From the outputs of the caller's input projections, per sequence:
//!
//! 1. depthwise causal conv1d over time (no bias, state = the previous K-1 inputs), then SiLU
//!    (`conv`, `prep`);
//! 2. split into q, k, v heads; q and k L2-normalised per head, q times `q_scale` (`prep`);
//! 3. gates `beta = sigmoid(b)`, `g = softplus(a + dt_bias) * ssm_a` (log decay, <= 0);
//! 4. the gated delta rule per value head h on key head `h % Hk` (ggml's tiled broadcast):
//!    `S <- e^g S; u = beta (v - S^T k); S <- S + k u^T; o = S^T q` (`recurrent`, `chunk`);
//! 5. `y = RMSNorm(o) * norm_w * silu(z)` per head (`gnorm`); the caller applies W_out.
//!
//! Inference ([`forward`]) continues from a [`GdnState`] and leaves it updated, with the
//! recurrent kernel for short inputs (decode) and the chunked WY form otherwise. Training
//! ([`forward_train`] / [`backward`], in `train`) starts from a zero state, always runs the
//! chunked form, stores the state at every chunk start and backpropagates through the chunked
//! (WY) form itself (`chunk_bwd`). Both forwards call the same kernels.
//!
//! Letters: T tokens of one sequence, Hk key heads, Hv value heads (a multiple of Hk), Dk / Dv
//! key / value head sizes, K conv taps, W = 2 Hk Dk + Hv Dv conv channels, C chunk length.
//! Layouts: qkv (T, W) rows [q (Hk Dk) | k (Hk Dk) | v (Hv Dv)], z (T, Hv Dv), b and a
//! (T, Hv), out (T, Hv Dv); conv_w (W, K) (GGUF `ssm_conv1d`: tap K-1 multiplies the current
//! token), dt_bias and ssm_a (Hv) (`ssm_a` = -exp(A_log)), norm_w (Dv).
//!
//! ```
//! use tinynn::layers::gdn::{forward, GdnParams, GdnShape, GdnState};
//! let sh = GdnShape::new(1, 2, 8, 8, 4, 1e-6);
//! let (w, t) = (sh.conv_channels(), 3);
//! let (conv_w, ones) = (vec![0.1; w * sh.kernel], vec![1.0; 8]);
//! let (dt_bias, ssm_a) = (vec![0.0; 2], vec![-1.0; 2]);
//! let p = GdnParams { conv_w: &conv_w, dt_bias: &dt_bias, ssm_a: &ssm_a, norm_w: &ones };
//! let mut state = GdnState::new(&sh);
//! let (qkv, z, ba) = (vec![0.5; t * w], vec![1.0; t * 16], vec![0.0; t * 2]);
//! let mut out = vec![0.0; t * sh.value_width()];
//! forward(&sh, p, &qkv, &z, &ba, &ba, &mut state, &mut out); // prefill 3 tokens
//! forward(&sh, p, &qkv[..w], &z[..16], &ba[..2], &ba[..2], &mut state, &mut out[..16]); // decode
//! ```

mod chunk;
mod chunk_bwd;
mod conv;
mod delta;
mod gnorm;
mod linalg;
mod prep;
mod recurrent;
mod train;

use super::rows_per_task;

pub use delta::Kernel;
pub use train::{backward, forward_train, GdnSaved};

/// Inputs of at least this many tokens run the chunked kernel in [`forward`], shorter ones
/// the recurrent one. Measured on one AVX-512 core (Hk 2, Hv 8, Dk = Dv = 128): chunked is
/// ahead from about 3 tokens (2x at 8), recurrent at 1; at Dk = Dv = 64 they cross near 8.
pub const CHUNKED_MIN_TOKENS: usize = 8;

/// The sizes and constants of one GDN layer.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GdnShape {
    pub hk: usize,
    pub hv: usize,
    pub dk: usize,
    pub dv: usize,
    /// Conv taps K.
    pub kernel: usize,
    /// RMS norm eps of the output norm.
    pub eps: f32,
    /// eps of the q / k L2 norm: `x / sqrt(sum x^2 + eps_l2)` (llama.cpp passes the rms eps).
    pub eps_l2: f32,
    /// Factor on the normalised q (the model's 1 / sqrt(Dk)).
    pub q_scale: f32,
    /// Chunk length C of the chunked kernel.
    pub chunk: usize,
}

impl GdnShape {
    /// With `eps_l2 = eps` and `q_scale = 1/sqrt(Dk)`, as Qwen3.5 runs, and chunks of 32:
    /// on a CPU, 16 to 32 ran fastest (at T = 512, Dk = Dv = 128, 64 took about twice as long,
    /// more than the recurrent kernel), and 32 stores half the chunk states of 16.
    pub fn new(hk: usize, hv: usize, dk: usize, dv: usize, kernel: usize, eps: f32) -> Self {
        assert!(
            hk > 0 && hv.is_multiple_of(hk) && dk > 0 && dv > 0 && kernel > 0,
            "gdn shape: {hk} key heads must divide {hv} value heads, sizes nonzero"
        );
        Self {
            hk,
            hv,
            dk,
            dv,
            kernel,
            eps,
            eps_l2: eps,
            q_scale: 1.0 / (dk as f32).sqrt(),
            chunk: 32,
        }
    }

    /// Conv channels W = 2 Hk Dk + Hv Dv, the width of a qkv row.
    pub fn conv_channels(&self) -> usize {
        2 * self.hk * self.dk + self.hv * self.dv
    }

    /// Hv Dv, the width of a z or output row.
    pub fn value_width(&self) -> usize {
        self.hv * self.dv
    }

    /// (K-1) W floats of conv state.
    pub fn conv_state_len(&self) -> usize {
        (self.kernel - 1) * self.conv_channels()
    }

    /// Hv Dk Dv floats of delta-rule state.
    pub fn ssm_state_len(&self) -> usize {
        self.hv * self.dk * self.dv
    }

    /// All the state one sequence carries.
    pub fn state_len(&self) -> usize {
        self.conv_state_len() + self.ssm_state_len()
    }

    /// Chunks of C covering t tokens.
    pub fn n_chunks(&self, t: usize) -> usize {
        t.div_ceil(self.chunk)
    }
}

/// Parameters of one layer, as slices (laid out as GGUF stores them; see the module doc).
#[derive(Clone, Copy)]
pub struct GdnParams<'a> {
    pub conv_w: &'a [f32],
    pub dt_bias: &'a [f32],
    pub ssm_a: &'a [f32],
    pub norm_w: &'a [f32],
}

/// Gradients of [`GdnParams`], added into by [`backward`].
pub struct GdnGrads<'a> {
    pub conv_w: &'a mut [f32],
    pub dt_bias: &'a mut [f32],
    pub ssm_a: &'a mut [f32],
    pub norm_w: &'a mut [f32],
}

/// What one sequence carries between calls: conv (K-1, W), the last K-1 conv inputs, and
/// s (Hv, Dk, Dv), each value head's delta-rule state. Zero for a new sequence.
#[derive(Clone, Debug, PartialEq)]
pub struct GdnState {
    pub conv: Vec<f32>,
    pub s: Vec<f32>,
}

impl GdnState {
    pub fn new(sh: &GdnShape) -> Self {
        Self {
            conv: vec![0.0; sh.conv_state_len()],
            s: vec![0.0; sh.ssm_state_len()],
        }
    }

    /// Back to the state of a new sequence.
    pub fn reset(&mut self) {
        self.conv.fill(0.0);
        self.s.fill(0.0);
    }
}

/// The forward's intermediate values for T tokens (what the backward reads, in training).
struct Acts {
    /// (K, W) the conv taps transposed.
    wt: Vec<f32>,
    /// (T, W) conv output before SiLU.
    c: Vec<f32>,
    /// (2 Hk, T, Dk): the q heads (normalised, times q_scale), then the k heads (normalised).
    qk: Vec<f32>,
    /// (2 Hk, T) their 1 / sqrt(sum x^2 + eps_l2).
    rqk: Vec<f32>,
    /// (Hv, T, Dv) SiLU'd v.
    v: Vec<f32>,
    /// (Hv, T) beta, the log decay g, and a + dt_bias.
    beta: Vec<f32>,
    g: Vec<f32>,
    gx: Vec<f32>,
    /// (Hv, T, Dv) delta-rule output.
    o: Vec<f32>,
    /// (T, Hv) 1 / rms of o.
    rstd: Vec<f32>,
}

impl Acts {
    fn new() -> Self {
        let e = Vec::new;
        Self {
            wt: e(),
            c: e(),
            qk: e(),
            rqk: e(),
            v: e(),
            beta: e(),
            g: e(),
            gx: e(),
            o: e(),
            rstd: e(),
        }
    }

    /// Sizes every buffer for t tokens (reusing the allocations).
    fn fit(&mut self, sh: &GdnShape, t: usize) {
        let (hk, hv) = (sh.hk, sh.hv);
        self.wt.resize(sh.kernel * sh.conv_channels(), 0.0);
        self.c.resize(t * sh.conv_channels(), 0.0);
        self.qk.resize(2 * hk * t * sh.dk, 0.0);
        self.rqk.resize(2 * hk * t, 0.0);
        self.v.resize(hv * t * sh.dv, 0.0);
        for x in [&mut self.beta, &mut self.g, &mut self.gx, &mut self.rstd] {
            x.resize(hv * t, 0.0);
        }
        self.o.resize(hv * t * sh.dv, 0.0);
    }

    fn tokens(&self, sh: &GdnShape) -> usize {
        self.beta.len() / sh.hv
    }
}

/// The forward of T tokens (T from `acts`, sized by the caller) from conv state `conv0`
/// (read only) and delta state `s` (updated), storing each chunk's start state in `states`
/// (Hv, n_chunks, Dk, Dv) when given.
#[allow(clippy::too_many_arguments)]
fn run_forward(
    sh: &GdnShape,
    p: GdnParams,
    (qkv, z, b, a): (&[f32], &[f32], &[f32], &[f32]),
    conv0: &[f32],
    s: &mut [f32],
    acts: &mut Acts,
    out: &mut [f32],
    kernel: Kernel,
    states: Option<&mut [f32]>,
) {
    let t = acts.tokens(sh);
    let (w, vw, hv) = (sh.conv_channels(), sh.value_width(), sh.hv);
    assert!(
        qkv.len() == t * w && z.len() == t * vw && b.len() == t * hv && a.len() == t * hv,
        "gdn forward: input lengths for {t} tokens"
    );
    assert_eq!(out.len(), t * vw, "gdn forward: output length");
    check_params(sh, p);
    conv::transpose_taps(p.conv_w, sh.kernel, &mut acts.wt);
    conv::forward(&acts.wt, sh.kernel, qkv, conv0, &mut acts.c);
    prep::forward(sh, &acts.c, &mut acts.qk, &mut acts.rqk, &mut acts.v, t);
    prep::gates_forward(sh, b, a, p, &mut acts.beta, &mut acts.g, &mut acts.gx, t);
    let x = delta::Inputs::new(sh, t, &acts.qk, &acts.v, &acts.beta, &acts.g);
    delta::forward(sh, kernel, x, s, &mut acts.o, states);
    gnorm::forward(sh, &acts.o, z, p.norm_w, out, &mut acts.rstd, t);
}

/// Rows of `width` work each handed to one rayon task, out of n: [`rows_per_task`] kept
/// within n so that chunk sizes never overflow.
fn per_task(width: usize, n: usize) -> usize {
    rows_per_task(width).min(n).max(1)
}

fn check_params(sh: &GdnShape, p: GdnParams) {
    assert!(
        p.conv_w.len() == sh.conv_channels() * sh.kernel
            && p.dt_bias.len() == sh.hv
            && p.ssm_a.len() == sh.hv
            && p.norm_w.len() == sh.dv,
        "gdn: parameter lengths"
    );
}

thread_local! {
    static ACTS: std::cell::RefCell<Acts> = std::cell::RefCell::new(Acts::new());
}

/// Inference: T >= 1 tokens of one sequence, qkv (T, W), z (T, Hv Dv), b, a (T, Hv) ->
/// out (T, Hv Dv), continuing from `state` and leaving it updated, so a prefill followed by
/// single-token calls computes what one call over all the tokens would. Runs the chunked
/// kernel from [`CHUNKED_MIN_TOKENS`] tokens on, the recurrent one below.
#[allow(clippy::too_many_arguments)]
pub fn forward(
    sh: &GdnShape,
    p: GdnParams,
    qkv: &[f32],
    z: &[f32],
    b: &[f32],
    a: &[f32],
    state: &mut GdnState,
    out: &mut [f32],
) {
    let t = b.len() / sh.hv;
    let kernel = if t >= CHUNKED_MIN_TOKENS {
        Kernel::Chunked
    } else {
        Kernel::Recurrent
    };
    forward_with(sh, p, (qkv, z, b, a), state, out, kernel);
}

/// [`forward`] with the delta-rule kernel chosen by the caller (both compute the same values
/// to rounding). Long inputs run in pieces of 16 chunks, which bounds the scratch memory and
/// changes nothing: the pieces start on chunk boundaries and the state carries across.
pub fn forward_with(
    sh: &GdnShape,
    p: GdnParams,
    (qkv, z, b, a): (&[f32], &[f32], &[f32], &[f32]),
    state: &mut GdnState,
    out: &mut [f32],
    kernel: Kernel,
) {
    let (w, vw, hv) = (sh.conv_channels(), sh.value_width(), sh.hv);
    assert!(
        state.conv.len() == sh.conv_state_len() && state.s.len() == sh.ssm_state_len(),
        "gdn forward: state lengths"
    );
    let t = b.len() / hv;
    assert!(
        qkv.len() == t * w && z.len() == t * vw && out.len() == t * vw,
        "gdn forward: lengths for {t} tokens"
    );
    assert!(
        b.len() == t * hv && a.len() == t * hv,
        "gdn forward: gate lengths"
    );
    let piece = 16 * sh.chunk;
    let mut run = |acts: &mut Acts| {
        for t0 in (0..t).step_by(piece) {
            let n = piece.min(t - t0);
            acts.fit(sh, n);
            let (x, zz) = (&qkv[t0 * w..(t0 + n) * w], &z[t0 * vw..(t0 + n) * vw]);
            let (bb, aa) = (&b[t0 * hv..(t0 + n) * hv], &a[t0 * hv..(t0 + n) * hv]);
            let o = &mut out[t0 * vw..(t0 + n) * vw];
            let ins = (x, zz, bb, aa);
            run_forward(sh, p, ins, &state.conv, &mut state.s, acts, o, kernel, None);
            conv::update_state(&mut state.conv, x, w);
        }
    };
    // the scratch is per thread; a nested call on this thread (a rayon task stolen while this
    // one waits) gets its own
    ACTS.with(|cell| match cell.try_borrow_mut() {
        Ok(mut acts) => run(&mut acts),
        Err(_) => run(&mut Acts::new()),
    });
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_grad;
