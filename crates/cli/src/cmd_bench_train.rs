//! `toy bench --train RECIPE [--steps N] [--set k=v]`: trains a recipe (language model or ViT)
//! for N steps in a scratch run folder and reports the step time, tokens or images per second,
//! and where the step's thread time goes by kind of work (`tinynn::profile`: matrix products,
//! attention, norms, optimizer, and the rest), measured over the steps after the first two.

use anyhow::{anyhow, Result};
use std::path::Path;
use tinynn::profile::{self, Kind};
use toy::train::events::Event;

/// Steps left out before the profile starts (allocation, first-touch page faults).
const WARM: usize = 2;

struct Measure {
    steps: Vec<(f64, f64)>,
    last_time: Option<f64>,
    totals: Option<[(Kind, f64); 4]>,
    until: usize,
}

impl Measure {
    fn observe(&mut self, e: &Event) {
        if let Event::Step {
            step, tok_s, time, ..
        } = e
        {
            if *step == WARM {
                profile::enable(true);
            } else if *step > WARM {
                if let Some(t0) = self.last_time {
                    self.steps.push((time - t0, *tok_s));
                }
            }
            if *step == self.until {
                self.totals = Some(profile::totals());
                profile::enable(false);
            }
            self.last_time = Some(*time);
        }
    }
}

pub fn run(recipe: &Path, steps: usize, set: &[String], json: bool) -> Result<()> {
    let steps = steps.max(WARM + 2);
    let text = std::fs::read_to_string(recipe)
        .map_err(|e| anyhow!("reading {}: {e}", recipe.display()))?;
    let scratch = std::env::temp_dir().join(format!("toy-bench-train-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    let mut m = Measure {
        steps: Vec::new(),
        last_time: None,
        totals: None,
        until: steps,
    };
    let (unit, name) = if toy::vision::train::is_vit_recipe(&text) {
        let mut sets = set.to_vec();
        sets.extend([
            format!("train.steps={steps}"),
            format!("train.eval_every={}", steps + 1),
            format!("train.checkpoint_every={}", steps + 1),
        ]);
        let r = toy::vision::train::VitRecipe::parse(&text, "recipe", &sets)
            .map_err(|e| anyhow!("{}: {e}", recipe.display()))?;
        let hooks = toy::vision::train::VitHooks {
            stop_after: Some(steps),
            ..Default::default()
        };
        toy::vision::train::train(&r, &scratch, &hooks, |e| m.observe(e))
            .map_err(|e| anyhow!(e))?;
        ("images/s", r.name)
    } else {
        let mut sets = set.to_vec();
        sets.extend([
            format!("train.steps={steps}"),
            format!("eval.interval={}", steps + 1),
            format!("checkpoint.interval={}", steps + 1),
        ]);
        let r = toy::train::recipe::Recipe::load(recipe, &sets)?;
        toy::train::trainer::ensure_data(&r)?;
        let run = toy::train::run::RunDir::create(&scratch, &r)?;
        let hooks = toy::train::trainer::Hooks {
            stop_after: Some(steps),
            ..Default::default()
        };
        toy::train::trainer::train(&run, &r, false, &hooks, &mut |e| m.observe(e))?;
        ("tokens/s", r.name)
    };
    let _ = std::fs::remove_dir_all(&scratch);
    report(&m, &name, unit, json)
}

fn report(m: &Measure, name: &str, unit: &str, json: bool) -> Result<()> {
    let mut times: Vec<f64> = m.steps.iter().map(|s| s.0).collect();
    let mut rates: Vec<f64> = m.steps.iter().map(|s| s.1).collect();
    times.sort_by(f64::total_cmp);
    rates.sort_by(f64::total_cmp);
    let median = |v: &[f64]| v.get(v.len() / 2).copied().unwrap_or(0.0);
    let (step_s, rate) = (median(&times), median(&rates));
    let wall: f64 = m.steps.iter().map(|s| s.0).sum();
    let threads = rayon::current_num_threads() as f64;
    let totals = m
        .totals
        .ok_or_else(|| anyhow!("the run ended before the profile did"))?;
    let mut parts: Vec<(String, f64)> = totals
        .iter()
        .map(|(k, s)| {
            (
                format!("{k:?}").to_lowercase(),
                *s / (wall * threads).max(1e-12),
            )
        })
        .collect();
    let other = 1.0 - parts.iter().map(|p| p.1).sum::<f64>();
    parts.push(("other".into(), other.max(0.0)));
    if json {
        let split: serde_json::Map<String, serde_json::Value> = parts
            .iter()
            .map(|(k, v)| (k.clone(), (*v).into()))
            .collect();
        let out = serde_json::json!({
            "recipe": name, "steps_measured": m.steps.len(), "step_s": step_s,
            "rate": rate, "unit": unit, "threads": threads, "split": split,
        });
        println!("{out}");
        return Ok(());
    }
    println!(
        "{name}: {:.1} ms per step, {rate:.0} {unit} (median of {} steps, {threads} threads)",
        1e3 * step_s,
        m.steps.len()
    );
    println!("share of the step's thread time:");
    for (k, v) in parts {
        println!("  {k:<10} {:>5.1}%", 100.0 * v);
    }
    Ok(())
}
