//! Activation taps (`toy::model::tap`) on tiny synthetic llama, GPT-2 and qwen35 models:
//! capturing changes no result, the points come in forward order with their shapes, the
//! residual stream is the previous one plus the block's two outputs, and GDN layers report
//! one state norm per value head.

#[path = "common/hybrid.rs"]
mod hybrid;
#[path = "common/synthetic.rs"]
mod synthetic;

use tinynn::quant::GgmlType;
use toy::model::tap::Taps;
use toy::model::{Logits, Model};

fn run(m: &Model, toks: &[u32], at: Option<&str>) -> (Vec<f32>, Option<Taps>) {
    let mut st = m.new_state(64, 64);
    st.taps = at.map(|a| Box::new(Taps::new(a)));
    let logits = m.forward(&mut st, toks, Logits::All).unwrap().to_vec();
    (logits, st.taps.take().map(|t| *t))
}

#[test]
fn taps_change_nothing_and_the_stream_adds_up() {
    for spec in [synthetic::LLAMA, synthetic::GPT2] {
        let m = synthetic::model(&spec, GgmlType::Q8_0);
        let toks: Vec<u32> = (0..9).map(|i| (i * 7 % spec.vocab) as u32).collect();
        let (plain, none) = run(&m, &toks, None);
        assert!(none.is_none());
        let (tapped, taps) = run(&m, &toks, Some("blk.*"));
        assert_eq!(plain, tapped, "{}: taps changed the logits", spec.arch);
        let caps = taps.unwrap().captured;
        let names: Vec<&str> = caps.iter().map(|c| c.name.as_str()).collect();
        let mut want = Vec::new();
        for l in 0..spec.n_layer {
            for p in ["attn_norm", "attn_out", "ffn_out", "resid"] {
                want.push(format!("blk.{l}.{p}"));
            }
        }
        assert_eq!(names, want, "{}", spec.arch);
        assert!(caps
            .iter()
            .all(|c| (c.rows, c.cols) == (toks.len(), spec.c)));
        // resid(l) = resid(l - 1) + attn_out(l) + ffn_out(l)
        for l in 1..spec.n_layer {
            let get = |n: &str| &caps.iter().find(|c| c.name == n).unwrap().data;
            let (prev, a, f, r) = (
                get(&format!("blk.{}.resid", l - 1)),
                get(&format!("blk.{l}.attn_out")),
                get(&format!("blk.{l}.ffn_out")),
                get(&format!("blk.{l}.resid")),
            );
            for i in 0..r.len() {
                let sum = prev[i] + a[i] + f[i];
                assert!(
                    (sum - r[i]).abs() <= 1e-4 * sum.abs().max(1.0),
                    "{}",
                    spec.arch
                );
            }
        }
        let (_, only) = run(&m, &toks, Some("blk.1.ffn_out"));
        assert_eq!(only.unwrap().captured.len(), 1);
    }
}

#[test]
fn gdn_layers_report_their_state_norms() {
    let s = hybrid::tiny();
    let m = hybrid::model(&s, GgmlType::F32);
    let toks: Vec<u32> = (0..12).map(|i| (i * 5 % s.vocab) as u32).collect();
    let (plain, _) = run(&m, &toks, None);
    let (tapped, taps) = run(&m, &toks, Some("blk.*.gdn_state,blk.3.*"));
    assert_eq!(plain, tapped);
    let caps = taps.unwrap().captured;
    let states: Vec<_> = caps
        .iter()
        .filter(|c| c.name.ends_with("gdn_state"))
        .collect();
    let gdn_layers = s.recurrent.iter().filter(|&&r| r).count();
    assert_eq!(states.len(), gdn_layers);
    assert!(states.iter().all(|c| (c.rows, c.cols) == (1, s.hv)));
    assert!(states
        .iter()
        .all(|c| c.data.iter().all(|&v| v > 0.0 && v.is_finite())));
    // layer 3 is attention: its four points, no state
    let l3: Vec<&str> = caps
        .iter()
        .map(|c| c.name.as_str())
        .filter(|n| n.starts_with("blk.3."))
        .collect();
    assert_eq!(
        l3,
        [
            "blk.3.attn_norm",
            "blk.3.attn_out",
            "blk.3.ffn_out",
            "blk.3.resid"
        ]
    );
}
