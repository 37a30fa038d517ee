//! Training forward and backward of the GDN mixer core (see the module doc) for one sequence
//! of T tokens from a zero state. The forward always runs the chunked kernel and stores the
//! delta-rule state at every chunk start, (Hv, n_chunks, Dk, Dv); the backward runs through
//! the chunked (WY) form, recomputing each chunk from its start state. [`GdnSaved`] holds all
//! of it and the backward's scratch, allocated once for (shape, T) and reused every step.
//!
//! Gradients of the inputs (qkv, z, b, a) are written; those of the parameters are added.

use super::conv;
use super::delta::{self, GradsView, Kernel};
use super::gnorm;
use super::prep;
use super::{check_params, run_forward, Acts, GdnGrads, GdnParams, GdnShape};

/// What [`backward`] needs from [`forward_train`], and its scratch.
pub struct GdnSaved {
    shape: GdnShape,
    t: usize,
    acts: Acts,
    /// (T, W) and (T, Hv Dv): the inputs qkv and z.
    qkv: Vec<f32>,
    z: Vec<f32>,
    /// (K-1, W) zeros: the conv state a sequence starts from.
    conv0: Vec<f32>,
    /// (Hv, Dk, Dv) the running delta-rule state, and (Hv, n_chunks, Dk, Dv) its value at
    /// every chunk start.
    s: Vec<f32>,
    states: Vec<f32>,
    /// The backward's (T, Hv Dv) d o, (Hv, 2 T Dk + T Dv + 2 T) delta-rule input gradients,
    /// and (T, W) gradient of the conv output.
    d_o: Vec<f32>,
    dhead: Vec<f32>,
    dc: Vec<f32>,
}

impl GdnSaved {
    pub fn new(sh: &GdnShape, t: usize) -> Self {
        assert!(t > 0, "gdn: a training sequence needs a token");
        let mut acts = Acts::new();
        acts.fit(sh, t);
        Self {
            shape: *sh,
            t,
            acts,
            qkv: vec![0.0; t * sh.conv_channels()],
            z: vec![0.0; t * sh.value_width()],
            conv0: vec![0.0; sh.conv_state_len()],
            s: vec![0.0; sh.ssm_state_len()],
            states: vec![0.0; sh.n_chunks(t) * sh.ssm_state_len()],
            d_o: vec![0.0; t * sh.value_width()],
            dhead: vec![0.0; sh.hv * delta::grad_len(sh, t)],
            dc: vec![0.0; t * sh.conv_channels()],
        }
    }

    /// The T it was made for.
    pub fn tokens(&self) -> usize {
        self.t
    }
}

/// Training forward of one sequence of `saved.tokens()` tokens from a zero state: as
/// [`super::forward`] on a new [`super::GdnState`] (to rounding: this one always runs the
/// chunked kernel), keeping in `saved` what [`backward`] needs.
#[allow(clippy::too_many_arguments)]
pub fn forward_train(
    sh: &GdnShape,
    p: GdnParams,
    qkv: &[f32],
    z: &[f32],
    b: &[f32],
    a: &[f32],
    saved: &mut GdnSaved,
    out: &mut [f32],
) {
    assert!(
        saved.shape == *sh,
        "gdn: saved buffers made for another shape"
    );
    let GdnSaved {
        acts,
        qkv: sq,
        z: sz,
        conv0,
        s,
        states,
        ..
    } = saved;
    assert!(
        qkv.len() == sq.len() && z.len() == sz.len(),
        "gdn: input lengths"
    );
    sq.copy_from_slice(qkv);
    sz.copy_from_slice(z);
    s.fill(0.0);
    let ins = (qkv, z, b, a);
    run_forward(
        sh,
        p,
        ins,
        conv0,
        s,
        acts,
        out,
        Kernel::Chunked,
        Some(states),
    );
}

/// Backward of the last [`forward_train`] from dout (T, Hv Dv): dqkv (T, W), dz (T, Hv Dv),
/// db, da (T, Hv) written; the parameter gradients added into `grads`.
#[allow(clippy::too_many_arguments)]
pub fn backward(
    sh: &GdnShape,
    p: GdnParams,
    saved: &mut GdnSaved,
    dout: &[f32],
    dqkv: &mut [f32],
    dz: &mut [f32],
    db: &mut [f32],
    da: &mut [f32],
    grads: &mut GdnGrads,
) {
    assert!(
        saved.shape == *sh,
        "gdn: saved buffers made for another shape"
    );
    check_params(sh, p);
    let t = saved.t;
    assert!(dqkv.len() == saved.qkv.len() && db.len() == t * sh.hv && da.len() == t * sh.hv);
    let GdnSaved {
        acts,
        qkv,
        z,
        conv0,
        states,
        d_o,
        dhead,
        dc,
        ..
    } = saved;
    let norm = gnorm::Saved {
        o: &acts.o,
        z,
        w: p.norm_w,
        rstd: &acts.rstd,
        t,
    };
    gnorm::backward(dout, norm, d_o, dz, grads.norm_w);
    let x = delta::Inputs::new(sh, t, &acts.qk, &acts.v, &acts.beta, &acts.g);
    delta::backward(sh, x, states, d_o, dhead);
    let gv = GradsView::new(sh, t, dhead);
    let (dt, sa) = (&mut *grads.dt_bias, &mut *grads.ssm_a);
    prep::gates_backward(sh, gv, &acts.beta, &acts.gx, p.ssm_a, (db, da), dt, sa);
    prep::backward(sh, gv, &acts.c, &acts.qk, &acts.rqk, dc);
    conv::transpose_taps(p.conv_w, sh.kernel, &mut acts.wt);
    conv::backward(&acts.wt, sh.kernel, dc, qkv, conv0, dqkv, grads.conv_w);
}
