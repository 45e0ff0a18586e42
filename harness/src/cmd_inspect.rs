//! `memdial inspect --model DIR`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use memdial::engine::loader::Checkpointed;
use memdial::format::inspect::{findings, inspect_read, layer_pattern};

/// Arguments of `memdial inspect`.
#[derive(clap::Args)]
pub struct InspectArgs {
    /// Checkpoint directory (config.json + safetensors shards).
    #[arg(long)]
    pub model: PathBuf,
    /// Print the summary and problems as JSON.
    #[arg(long)]
    pub json: bool,
}

fn gb(b: u64) -> String {
    if b >= 1 << 30 {
        format!("{:.2} GiB", b as f64 / (1u64 << 30) as f64)
    } else {
        format!("{:.2} MiB", b as f64 / (1u64 << 20) as f64)
    }
}

/// Bits per routed weight of an RVQ checkpoint (`memdial pack --rvq`), else `None`.
fn rvq_bits(cfg: &memdial::format::config::ModelConfig) -> Option<usize> {
    match cfg.moe.as_ref().map(|m| m.expert_format) {
        Some(memdial::format::config::ExpertFormat::Rvq(r)) => Some(r.stages),
        _ => None,
    }
}

/// The `layout` line (safetensors, or what the lossless pack holds) and, for an RVQ
/// checkpoint, its expert form.
fn print_layout(
    ck: &memdial::format::checkpoint::Checkpoint,
    cfg: &memdial::format::config::ModelConfig,
) {
    if let Some(p) = &ck.lossless {
        println!(
            "layout       lossless pack: {} tensors, {} decoded in {} stored (ratio {:.4}), \
             codec {} v{}, packed from {}",
            p.index.header.tensors.len(),
            gb(p.decoded_bytes()),
            gb(p.index.stored_bytes()),
            p.ratio(),
            p.index.header.codec,
            p.index.header.version,
            p.index.header.source_dir
        );
    } else {
        println!("layout       safetensors");
    }
    if let Some(bits) = rvq_bits(cfg) {
        println!(
            "expert form  RVQ, {bits} bits per routed weight (lossy: `memdial pack --rvq`); \
             its per-layer codebooks count as trunk (pinned with it)"
        );
    }
}

pub fn run(a: &InspectArgs) -> Result<ExitCode> {
    // The loader reads config + headers and computes the tensor table once.
    let c = Checkpointed::read(&a.model)?;
    let (s, problems) = inspect_read(&c.cfg, &c.ck, &c.specs)?;
    let found = findings(&a.model, &c.cfg, &c.ck);
    let cfg = &c.cfg;
    // A packed directory: what the lossless pack holds.
    let layout = c.ck.lossless.as_ref().map(|p| {
        let h = &p.index.header;
        serde_json::json!({
            "layout": "lossless",
            "codec": h.codec,
            "version": h.version,
            "packed_tensors": h.tensors.len(),
            "decoded_bytes": p.decoded_bytes(),
            "stored_bytes": p.index.stored_bytes(),
            "ratio": p.ratio(),
            "source_dir": h.source_dir,
            "source_safetensors_hash": h.source.safetensors_hash,
        })
    });
    if a.json {
        let v = serde_json::json!({"summary": s, "findings": found, "problems": problems,
            "valid": problems.is_empty(), "layout": layout, "rvq_bits": rvq_bits(cfg)});
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!("model        {} ({})", a.model.display(), s.model_type);
        println!(
            "layers       {} = {} KDA + {} MLA; {} dense + {} MoE",
            s.layers, s.kda_layers, s.mla_layers, s.dense_layers, s.moe_layers
        );
        println!("pattern      {}", layer_pattern(cfg));
        println!(
            "experts      {} per MoE layer, {} active per token{}",
            s.num_experts,
            s.experts_per_token,
            match &cfg.moe {
                Some(m) if m.num_expert_group > 1 => format!(
                    "; {} groups of {}, top {} groups kept",
                    m.num_expert_group,
                    m.num_experts / m.num_expert_group,
                    m.topk_group
                ),
                _ => String::new(),
            }
        );
        println!(
            "params       {:.3} B total, {:.3} B active per token",
            s.total_params as f64 / 1e9,
            s.active_params_per_token as f64 / 1e9
        );
        println!(
            "bytes        total {} = embeddings {} + lm_head {} + trunk {} + routed experts {}",
            gb(s.total_bytes),
            gb(s.embedding_bytes),
            gb(s.lm_head_bytes),
            gb(s.trunk_bytes),
            gb(s.routed_expert_bytes)
        );
        println!("per expert   {} bytes", s.bytes_per_expert);
        print_layout(&c.ck, cfg);
        if let Some(g) = &cfg.gpt_oss {
            println!(
                "KV cache     {} bytes per position per layer (sliding layers keep {} positions)",
                s.kv_cache_bytes_per_position, g.sliding_window
            );
            println!(
                "expert form  {}",
                match g.experts {
                    memdial::format::config::GptOssExperts::Mxfp4 => "MXFP4 (*_blocks / *_scales)",
                    memdial::format::config::GptOssExperts::Dense =>
                        "BF16 (gate_up_proj [E, D, 2I], down_proj [E, I, D])",
                }
            );
        } else {
            println!(
                "KDA state    {} bytes per layer per sequence",
                s.kda_state_bytes_per_layer
            );
            println!(
                "MLA cache    {} bytes per position per layer",
                s.mla_cache_bytes_per_position
            );
        }
        for n in &found.notes {
            println!("note         {n}");
        }
        if problems.is_empty() {
            println!("validation   OK: every tensor present with the right dtype and shape, ranges inside files, no overlaps");
        } else {
            println!("validation   {} problem(s):", problems.len());
            for p in &problems {
                println!("  - {p}");
            }
        }
    }
    Ok(if problems.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
