//! `toy devices [--json]`: the CPU (threads, the SIMD features the kernels use) and each
//! NVIDIA GPU (name, memory, compute capability), or why there is none (`tinynn::device`).

use anyhow::Result;
use tinynn::device::{cpu, gpus};

#[derive(clap::Args)]
pub struct Args {
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

pub fn run(a: Args) -> Result<()> {
    let c = cpu();
    let g = gpus();
    if a.json {
        let gpus: Vec<serde_json::Value> = g
            .as_ref()
            .map(|g| {
                g.iter()
                    .map(|d| {
                        serde_json::json!({
                            "device": format!("cuda:{}", d.index),
                            "name": d.name,
                            "memory_bytes": d.memory_bytes,
                            "compute_capability": format!("{}.{}", d.compute_capability.0, d.compute_capability.1),
                        })
                    })
                    .collect()
            })
            .unwrap_or_default();
        let v = serde_json::json!({
            "cpu": {"threads": c.threads, "features": c.features},
            "gpus": gpus,
            "no_gpu": g.as_ref().err().map(|e| e.to_string()),
        });
        println!("{v}");
        return Ok(());
    }
    println!("cpu: {} threads, {}", c.threads, c.features.join(" "));
    match g {
        Ok(g) if g.is_empty() => println!("no GPU: the NVIDIA driver reports none"),
        Ok(g) => {
            for d in g {
                let (maj, min) = d.compute_capability;
                let gib = d.memory_bytes as f64 / (1u64 << 30) as f64;
                println!(
                    "cuda:{}: {}, {gib:.1} GiB, compute capability {maj}.{min}",
                    d.index, d.name
                );
            }
        }
        Err(why) => println!("no GPU: {why}"),
    }
    Ok(())
}
