//! `toy inspect MODEL`: metadata, tensors (type, shape), parameter count, and the
//! layer-by-layer flow with shapes.

use crate::common::open_gguf;
use anyhow::Result;
use std::path::PathBuf;
use toy::gguf::Value;
use toy::model::{Arch, Config};

#[derive(clap::Args)]
pub struct Args {
    /// GGUF model file.
    model: PathBuf,
    #[arg(long)]
    json: bool,
}

/// A short rendering of a value: long arrays are summarised.
fn brief(v: &Value) -> serde_json::Value {
    match v {
        Value::Array(t, items) if items.len() > 8 => serde_json::json!({
            "array_of": format!("{t:?}"), "len": items.len(),
            "first": items.iter().take(5).map(brief).collect::<Vec<_>>() }),
        Value::Array(_, items) => serde_json::Value::Array(items.iter().map(brief).collect()),
        Value::String(s) if s.len() > 200 => serde_json::json!(format!(
            "{}... ({} bytes)",
            &s[..s.floor_char_boundary(200)],
            s.len()
        )),
        Value::String(s) => serde_json::json!(s),
        Value::Bool(b) => serde_json::json!(b),
        Value::F32(x) => serde_json::json!(x),
        Value::F64(x) => serde_json::json!(x),
        other => other
            .as_i64()
            .map(|i| serde_json::json!(i))
            .unwrap_or_else(|| serde_json::json!(other.as_u64())),
    }
}

/// The data flow through the stack, one line per step, with shapes (T tokens).
fn flow(c: &Config) -> Vec<String> {
    let (d, h, kv, ff, v) = (c.d_model, c.n_head, c.n_kv_head, c.d_ff, c.vocab);
    let hd = c.head_dim;
    let mut f = vec![format!("token_embd          (T) -> (T, {d})")];
    let gpt2 = c.arch == Arch::Gpt2;
    if gpt2 {
        f.push(format!("+ position_embd     (T) -> (T, {d})"));
    }
    let norm = if gpt2 { "layernorm" } else { "rmsnorm" };
    f.push(format!("{} x blk.i:", c.n_layer));
    f.push(format!("  attn_norm ({norm})  (T, {d}) -> (T, {d})"));
    if gpt2 {
        f.push(format!("  attn_qkv            (T, {d}) -> (T, {})", 3 * d));
    } else {
        f.push(format!(
            "  attn_q / attn_k / attn_v  (T, {d}) -> (T, {}) / (T, {}) / (T, {})",
            h * hd,
            kv * hd,
            kv * hd
        ));
        f.push(format!(
            "  rope ({}, base {}, {} dims)",
            if c.rope_neox { "neox" } else { "normal" },
            c.rope_base,
            c.rope_dim
        ));
    }
    f.push(format!(
        "  attention ({h} heads, {kv} kv heads, head {hd})  -> (T, {})",
        h * hd
    ));
    f.push(format!(
        "  attn_output         (T, {}) -> (T, {d}), + residual",
        h * hd
    ));
    f.push(format!("  ffn_norm ({norm})   (T, {d}) -> (T, {d})"));
    if gpt2 {
        f.push(format!("  ffn_up, gelu        (T, {d}) -> (T, {ff})"));
    } else {
        f.push(format!(
            "  ffn_gate, ffn_up, silu(gate)*up  (T, {d}) -> (T, {ff})"
        ));
    }
    f.push(format!(
        "  ffn_down            (T, {ff}) -> (T, {d}), + residual"
    ));
    f.push(format!("output_norm ({norm})  (T, {d}) -> (T, {d})"));
    f.push(format!("output                (T, {d}) -> (T, {v})"));
    f
}

pub fn run(a: Args) -> Result<()> {
    let f = open_gguf(&a.model)?;
    let params: u64 = f.tensors.iter().map(|t| t.n_elements()).sum();
    let cfg = Config::from_gguf(&f);
    let flow_lines = cfg.as_ref().map(flow).unwrap_or_default();
    if a.json {
        let meta: serde_json::Map<String, serde_json::Value> = f
            .metadata
            .iter()
            .map(|(k, v)| (k.clone(), brief(v)))
            .collect();
        let tensors: Vec<_> = f.tensors.iter().map(|t| serde_json::json!({"name": t.name, "type": t.ty.name(), "shape": t.dims, "bytes": t.n_bytes()})).collect();
        println!(
            "{}",
            serde_json::json!({"version": f.version, "metadata": meta, "tensors": tensors, "parameters": params, "flow": flow_lines})
        );
        return Ok(());
    }
    println!(
        "{}: GGUF v{}, {} metadata keys, {} tensors, {params} parameters ({:.1} M)",
        a.model.display(),
        f.version,
        f.metadata.len(),
        f.tensors.len(),
        params as f64 / 1e6
    );
    println!("\n== metadata");
    for (k, v) in &f.metadata {
        println!("{k:<45} {}", brief(v));
    }
    println!("\n== tensors");
    for t in &f.tensors {
        println!("{:<32} {:<6} {:?}", t.name, t.ty.name(), t.dims);
    }
    println!("\n== flow");
    match cfg {
        Ok(_) => flow_lines.iter().for_each(|l| println!("{l}")),
        Err(e) => println!("(not a runnable model: {e})"),
    }
    Ok(())
}
