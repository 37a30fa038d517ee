//! The sampler chain's own tests (`sampler.rs`); llama.cpp's recorded values are checked in
//! `tests/samplers_llama.rs`.
use super::*;

#[test]
fn greedy_takes_argmax_and_bias_changes_it() {
    let mut s = Sampler::new(SamplerConfig::greedy());
    assert_eq!(s.sample(&[0.1, 2.0, 1.0]), 1);
    s.cfg.logit_bias = vec![(1, f32::NEG_INFINITY)];
    assert_eq!(s.sample(&[0.1, 2.0, 1.0]), 2);
}

#[test]
fn penalties_push_down_repeated_tokens() {
    let mut s = Sampler::new(SamplerConfig {
        repeat_penalty: 2.0,
        ..SamplerConfig::greedy()
    });
    s.accept(1);
    assert_eq!(s.sample(&[0.0, 2.0, 1.5]), 2);
    let mut l = [1.0f32, -1.0];
    let mut p = Sampler::new(SamplerConfig {
        presence_penalty: 0.5,
        frequency_penalty: 0.25,
        ..SamplerConfig::greedy()
    });
    p.accept(0);
    p.accept(0);
    p.accept(1);
    p.adjust(&mut l);
    assert_eq!(l, [1.0 - 0.5 - 0.5, -1.0 - 0.25 - 0.5]);
}

#[test]
fn same_seed_same_draws_and_top_k_one_is_greedy() {
    let logits: Vec<f32> = (0..50).map(|i| (i as f32 * 0.37).sin()).collect();
    let cfg = SamplerConfig {
        temperature: 1.5,
        top_k: 0,
        top_p: 1.0,
        min_p: 0.0,
        seed: 7,
        ..Default::default()
    };
    let draws = |cfg: &SamplerConfig| {
        let mut s = Sampler::new(cfg.clone());
        (0..20).map(|_| s.sample(&logits)).collect::<Vec<_>>()
    };
    assert_eq!(draws(&cfg), draws(&cfg));
    let d = draws(&cfg);
    assert!(d.iter().any(|&x| x != d[0]), "high temperature should vary");
    let k1 = SamplerConfig {
        top_k: 1,
        ..cfg.clone()
    };
    assert!(draws(&k1).iter().all(|&x| x == argmax(&logits)));
}

#[test]
fn sample_in_place_draws_as_sample_does() {
    let logits: Vec<f32> = (0..64).map(|i| (i as f32 * 0.61).cos() * 3.0).collect();
    let cfg = SamplerConfig {
        temperature: 1.0,
        top_k: 0,
        top_p: 0.9,
        presence_penalty: 0.5,
        logit_bias: vec![(3, 2.0)],
        seed: 11,
        ..Default::default()
    };
    let (mut a, mut b) = (Sampler::new(cfg.clone()), Sampler::new(cfg));
    for _ in 0..30 {
        let x = a.sample(&logits);
        let y = b.sample_in_place(&mut logits.clone());
        assert_eq!(x, y);
        a.accept(x);
        b.accept(y);
    }
    assert!(Sampler::new(SamplerConfig::greedy()).is_plain_greedy());
    let biased = SamplerConfig {
        logit_bias: vec![(0, 1.0)],
        ..SamplerConfig::greedy()
    };
    assert!(!Sampler::new(biased).is_plain_greedy());
}

#[test]
fn top_p_and_min_p_cut_the_tail() {
    // probabilities ~ [0.64, 0.24, 0.09, 0.03]
    let logits = [3.0f32, 2.0, 1.0, 0.0];
    let mut s = Sampler::new(SamplerConfig {
        temperature: 1.0,
        top_k: 0,
        top_p: 0.5,
        min_p: 0.0,
        seed: 1,
        ..Default::default()
    });
    assert!((0..100).all(|_| s.sample(&logits) == 0));
    let mut m = Sampler::new(SamplerConfig {
        temperature: 1.0,
        top_k: 0,
        top_p: 1.0,
        min_p: 0.3,
        seed: 1,
        ..Default::default()
    });
    assert!((0..200).all(|_| m.sample(&logits) < 2));
}

/// Temperature divides the logits before the softmax: the kept distribution is
/// softmax(l / T) at every T (a sampler that ignored it would give the same at all three).
#[test]
fn temperature_shapes_the_distribution() {
    let logits = [2.0f32, 1.0, 0.0, -1.5];
    for t in [0.5f32, 1.0, 2.0] {
        let mut s = Sampler::new(SamplerConfig {
            temperature: t,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            ..SamplerConfig::default()
        });
        let got = s.distribution(&logits);
        let z: f64 = logits.iter().map(|&l| ((l / t) as f64).exp()).sum();
        assert_eq!(got.len(), logits.len());
        for (id, p) in got {
            let want = ((logits[id as usize] / t) as f64).exp() / z;
            assert!((p - want).abs() < 1e-6, "T={t}: p({id}) = {p}, want {want}");
        }
    }
    // the one default is llama.cpp's
    assert_eq!(SamplerConfig::default().temperature, 0.8);
    assert_eq!(DEFAULTS.top_p, 0.95);
}

/// The one-pass top-k keeps exactly the first k of a full sort (larger logit, then lower
/// id), with ties, banned (-inf) and NaN logits, on small and 262k vocabularies.
#[test]
fn top_k_is_the_first_k_of_a_full_sort() {
    let mut state = 7u64;
    for (n, k) in [(10, 3), (50, 50), (1000, 40), (262_144, 40), (262_144, 1)] {
        let l: Vec<f32> = (0..n)
            .map(|i| {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                match (state >> 60, i % 97) {
                    (0, _) => f32::NEG_INFINITY,
                    (1, 0) => f32::NAN,
                    // few distinct values: many ties
                    (s, _) => ((state >> 20) % 64) as f32 / 8.0 - s as f32,
                }
            })
            .collect();
        let mut want: Vec<(u32, f32)> = (l.iter().enumerate())
            .filter(|(_, v)| v.is_finite())
            .map(|(i, v)| (i as u32, *v))
            .collect();
        want.sort_unstable_by(rank);
        want.truncate(k);
        let mut got = Vec::new();
        top_k(&l, k, &mut got);
        got.sort_unstable_by(rank);
        assert_eq!(got, want, "n={n} k={k}");
    }
}

fn open(cfg: SamplerConfig) -> Sampler {
    Sampler::new(SamplerConfig {
        top_k: 0,
        top_p: 1.0,
        min_p: 0.0,
        temperature: 1.0,
        ..cfg
    })
}

/// The newer samplers change what is drawn from as their definitions say (`samplers.rs`
/// tests each alone): a sampler that ignored its setting would keep every token here.
#[test]
fn top_n_sigma_typical_and_dynamic_temperature_shape_the_distribution() {
    let support = |d: Vec<(u32, f64)>| {
        let mut ids: Vec<u32> = d.iter().map(|x| x.0).collect();
        ids.sort();
        ids
    };
    let l = [3.0f32, 2.0, 1.0, 0.0, -1.0];
    let mut s = open(SamplerConfig {
        top_n_sigma: 1.0,
        ..DEFAULTS
    });
    assert_eq!(support(s.distribution(&l)), vec![0, 1]);
    let l2 = std::f32::consts::LN_2;
    let t = [3.0 * l2, 2.0 * l2, l2, l2];
    let mut s = open(SamplerConfig {
        typical_p: 0.5,
        ..DEFAULTS
    });
    let d = s.distribution(&t);
    assert_eq!(support(d.clone()), vec![0, 1]);
    assert!((d.iter().find(|x| x.0 == 0).unwrap().1 - 2.0 / 3.0).abs() < 1e-9);
    let two = [1.0f32, 0.0];
    let mut s = open(SamplerConfig {
        dynatemp_range: 0.5,
        ..DEFAULTS
    });
    let tdyn = super::super::samplers::dynamic_temperature(&[(0, 1.0), (1, 0.0)], 1.0, 0.5, 1.0);
    let want = 1.0 / (1.0 + (-1.0 / tdyn as f64).exp());
    let p0 = s.distribution(&two).iter().find(|x| x.0 == 0).unwrap().1;
    assert!(
        (p0 - want).abs() < 1e-6 && (p0 - 0.731).abs() > 0.01,
        "{p0} vs {want}"
    );
}

/// XTC removes the top choices at its rate: token 0 (p 0.63, with token 1 also above the
/// threshold) is drawn only in the draws where XTC does not fire.
#[test]
fn xtc_excludes_the_top_choices_at_its_rate() {
    let l: Vec<f32> = (0..6).map(|i| -(i as f32)).collect();
    let mut s = open(SamplerConfig {
        xtc_probability: 0.5,
        xtc_threshold: 0.2,
        seed: 11,
        ..DEFAULTS
    });
    let n = 4000;
    let zeros = (0..n).filter(|_| s.sample(&l) == 0).count() as f64 / n as f64;
    let p0 = 1.0 / (0..6).map(|i| (-(i as f64)).exp()).sum::<f64>();
    assert!((zeros - 0.5 * p0).abs() < 0.03, "{zeros} vs {}", 0.5 * p0);
}

/// Mirostat 1.0 and 2.0 hold the surprise of the drawn tokens near tau (within 10%
/// averaged over 500 tokens), on Zipf-shaped logits over 1000 tokens that change each
/// step; a sampler ignoring tau would drift to the distribution's own entropy.
#[test]
fn mirostat_holds_the_surprise_near_tau() {
    for (version, tau) in [(2u8, 5.0f32), (2, 3.0), (1, 5.0), (1, 3.0)] {
        let mut s = open(SamplerConfig {
            mirostat: version,
            mirostat_tau: tau,
            seed: 3,
            ..DEFAULTS
        });
        let mut noise = 1u64;
        let mut total = 0f64;
        let steps = 500;
        for _ in 0..steps {
            let l: Vec<f32> = (0..1000)
                .map(|i| {
                    noise = noise
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    -1.1 * ((i + 1) as f32).ln()
                        + ((noise >> 40) as f32 / (1u64 << 24) as f32) * 0.5
                })
                .collect();
            let d = s.distribution(&l);
            let id = s.sample(&l);
            let p = d.iter().find(|x| x.0 == id).map_or(1.0, |x| x.1);
            total += -p.log2();
        }
        let mean = total / steps as f64;
        assert!(
            (mean - tau as f64).abs() <= 0.1 * tau as f64,
            "mirostat {version}: mean surprise {mean} for tau {tau}"
        );
    }
}
