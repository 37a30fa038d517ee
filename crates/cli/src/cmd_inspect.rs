//! `toy inspect MODEL`: metadata, tensors (type, shape), parameter count, and the
//! layer-by-layer flow with shapes.

use crate::common::open_gguf;
use anyhow::Result;
use std::path::PathBuf;
use toy::gguf::Value;
use toy::model::{Arch, Config, LayerKind};

#[derive(clap::Args)]
pub struct Args {
    /// GGUF model file.
    model: PathBuf,
    /// Print metadata, tensors and flow as one JSON object.
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

/// Per-sequence state: bytes that do not grow with the context (the recurrent layers'), and
/// bytes per position (the attention layers' f16 keys and values).
fn state_bytes(c: &Config) -> (usize, usize) {
    let n_attn = c
        .kinds
        .iter()
        .filter(|&&k| k == LayerKind::Attention)
        .count();
    let per_pos = n_attn * 2 * c.n_kv_head * c.head_dim * 2;
    let fixed = c.gdn.map_or(0, |g| {
        let n_gdn = c.n_layer - n_attn;
        n_gdn * 4 * (g.conv_state_len() + g.ssm_state_len())
    });
    (fixed, per_pos)
}

/// The flow of a hybrid (Qwen3.5) stack: the layer kinds, then each kind's steps.
fn hybrid_flow(c: &Config) -> Vec<String> {
    let (d, h, kv, ff, v, hd) = (
        c.d_model,
        c.n_head,
        c.n_kv_head,
        c.d_ff,
        c.vocab,
        c.head_dim,
    );
    let kinds: Vec<&str> = c.kinds.iter().map(|k| k.name()).collect();
    let mut f = vec![
        format!("token_embd          (T) -> (T, {d})"),
        format!("{} x blk.i, kinds: [{}]", c.n_layer, kinds.join(", ")),
        format!("  attn_norm (rmsnorm)  (T, {d}) -> (T, {d})  [tap blk.i.attn_norm]"),
    ];
    if let Some(g) = c.gdn {
        let w = g.conv_channels();
        let vw = g.value_width();
        f.push(format!(
            "  gdn: attn_qkv / attn_gate / ssm_beta / ssm_alpha  (T, {d}) -> (T, {w}) / (T, {vw}) / (T, {}) / (T, {})",
            g.hv, g.hv
        ));
        f.push(format!(
            "  gdn: ssm_conv1d ({} taps, causal) + silu, l2norm q/k, delta rule ({} key heads, {} value heads, {}x{} state)  -> (T, {vw})",
            g.kernel, g.hk, g.hv, g.dk, g.dv
        ));
        f.push(format!(
            "  gdn: ssm_norm(o) * silu(z), ssm_out  (T, {vw}) -> (T, {d}), + residual  [tap blk.i.attn_out, blk.i.gdn_state]"
        ));
    }
    f.push(format!(
        "  attn: attn_q (query + gate) / attn_k / attn_v  (T, {d}) -> (T, {}) / (T, {}) / (T, {})",
        2 * h * hd,
        kv * hd,
        kv * hd
    ));
    f.push(format!(
        "  attn: q/k rmsnorm, rope (neox, base {}, {} of {hd} dims), attention ({h} heads, {kv} kv heads) * sigmoid(gate), attn_output  -> (T, {d}), + residual  [tap blk.i.attn_out]",
        c.rope_base, c.rope_dim
    ));
    f.push(format!(
        "  post_attention_norm (rmsnorm)  (T, {d}) -> (T, {d})"
    ));
    f.push(format!(
        "  ffn_gate, ffn_up, silu(gate)*up, ffn_down  (T, {d}) -> (T, {ff}) -> (T, {d}), + residual  [tap blk.i.ffn_out, blk.i.resid]"
    ));
    f.push(format!("output_norm (rmsnorm)  (T, {d}) -> (T, {d})"));
    f.push(format!(
        "output                (T, {d}) -> (T, {v})  [tap logits]"
    ));
    f
}

/// The data flow through the stack, one line per step, with shapes (T tokens).
fn flow(c: &Config) -> Vec<String> {
    if c.arch == Arch::Qwen35 {
        return hybrid_flow(c);
    }
    let (d, h, kv, ff, v) = (c.d_model, c.n_head, c.n_kv_head, c.d_ff, c.vocab);
    let hd = c.head_dim;
    let mut f = vec![format!("token_embd          (T) -> (T, {d})")];
    let gpt2 = c.arch == Arch::Gpt2;
    if gpt2 {
        f.push(format!("+ position_embd     (T) -> (T, {d})"));
    }
    let norm = if gpt2 { "layernorm" } else { "rmsnorm" };
    f.push(format!("{} x blk.i:", c.n_layer));
    f.push(format!(
        "  attn_norm ({norm})  (T, {d}) -> (T, {d})  [tap blk.i.attn_norm]"
    ));
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
        "  attn_output         (T, {}) -> (T, {d}), + residual  [tap blk.i.attn_out]",
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
        "  ffn_down            (T, {ff}) -> (T, {d}), + residual  [tap blk.i.ffn_out, blk.i.resid]"
    ));
    f.push(format!("output_norm ({norm})  (T, {d}) -> (T, {d})"));
    f.push(format!(
        "output                (T, {d}) -> (T, {v})  [tap logits]"
    ));
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
        let layers = cfg.as_ref().map_or(serde_json::Value::Null, |c| {
            let kinds: Vec<&str> = c.kinds.iter().map(|k| k.name()).collect();
            let (fixed, per_pos) = state_bytes(c);
            serde_json::json!({"kinds": kinds, "state_bytes_fixed": fixed, "state_bytes_per_position": per_pos})
        });
        println!(
            "{}",
            serde_json::json!({"version": f.version, "metadata": meta, "tensors": tensors, "parameters": params, "flow": flow_lines, "layers": layers})
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
        Ok(c) => {
            flow_lines.iter().for_each(|l| println!("{l}"));
            let (fixed, per_pos) = state_bytes(&c);
            println!(
                "\nper-sequence state: {:.1} KiB fixed (recurrent layers) + {per_pos} bytes per position (attention KV, f16); {:.1} MiB at ctx 4096",
                fixed as f64 / 1024.0,
                (fixed + 4096 * per_pos) as f64 / (1 << 20) as f64
            );
        }
        Err(e) => println!("(not a runnable model: {e})"),
    }
    Ok(())
}
