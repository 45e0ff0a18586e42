//! `memdial pack --lossless --model DIR --out PACKED`: write the lossless streamed
//! layout of a checkpoint (or, with `--stats`, only measure what it would save).
//! `memdial pack --raw …`: the same block layout, grouping and placement with every
//! block stored raw, the control for what coding buys (docs/lossless.md).
//! `memdial pack --rvq BITS …`: routed experts as residual vector quantization, a lossy
//! checkpoint (docs/lossless.md, "Lossy: RVQ experts").

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use memdial::format::lossless::codec::Codec;
use memdial::tools::pack::{pack_checkpoint_with, PackReport};
use memdial::util::units::fmt_bytes;

/// Arguments of `memdial pack`.
#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("layout").required(true).args(["lossless", "raw", "rvq"])))]
pub struct PackArgs {
    /// The lossless layout: BF16 trunk matrices and `lm_head` in coded 4096-aligned
    /// blocks that decode to the same bits.
    #[arg(long)]
    pub lossless: bool,
    /// The raw control: the lossless layout's blocks, grouping and file placement with
    /// every block stored as it is (ratio 1): what the layout buys without coding.
    #[arg(long)]
    pub raw: bool,
    /// Lossy: routed experts as residual vector quantization at BITS bits per weight
    /// (1..=8 stages of 256-entry codebooks over groups of 8, per layer and matrix
    /// kind); the trunk and shared experts unchanged. Writes a safetensors checkpoint.
    #[arg(long, value_name = "BITS", conflicts_with_all = ["stats", "codec"])]
    pub rvq: Option<usize>,
    /// Source checkpoint directory (with `tensors.sha256`: `memdial checksum`).
    #[arg(long)]
    pub model: PathBuf,
    /// Packed directory to write (must not exist).
    #[arg(long, required_unless_present = "stats")]
    pub out: Option<PathBuf>,
    /// Only measure: byte-plane entropy and the coded size per tensor class; write nothing.
    #[arg(long, conflicts_with = "out")]
    pub stats: bool,
    /// Block kinds: `smallest` (per block the smaller of 3-bit planes and the
    /// 15-entry nibble dictionary, ≈ 0.70) or `dict15` (nibble dictionary only, ≈ 0.75,
    /// about twice as fast to decode). With `--lossless` only.
    #[arg(long, default_value = "smallest", value_parser = ["smallest", "dict15"])]
    pub codec: String,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: &PackArgs) -> Result<ExitCode> {
    if let Some(bits) = a.rvq {
        return run_rvq(a, bits);
    }
    let out = if a.stats { None } else { a.out.as_deref() };
    let mut last = 0u64;
    let quiet = a.json;
    let codec = if a.raw {
        if a.codec != "smallest" {
            return Err(crate::args::usage(
                "--codec chooses the coded block kinds of --lossless; --raw stores every block raw",
            ));
        }
        Codec::Raw
    } else {
        Codec::parse(&a.codec).expect("clap checked the value")
    };
    let r = pack_checkpoint_with(&a.model, out, codec, &mut |done, total| {
        // Progress on stderr every ~5 %.
        if !quiet && total > 0 && (done - last) * 20 >= total {
            last = done;
            eprint!("\r{:3.0} %", 100.0 * done as f64 / total as f64);
        }
    })?;
    if !quiet {
        eprintln!("\r      ");
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        print_report(&r);
    }
    Ok(ExitCode::SUCCESS)
}

fn run_rvq(a: &PackArgs, bits: usize) -> Result<ExitCode> {
    let out = a
        .out
        .as_deref()
        .expect("clap requires --out without --stats");
    let quiet = a.json;
    let r = memdial::tools::rvq::pack_rvq(&a.model, out, bits, &mut |done, total| {
        if !quiet && (done * 20 / total.max(1) != (done - 1) * 20 / total.max(1)) {
            eprint!("\r{done}/{total} expert matrices");
        }
    })?;
    if !quiet {
        eprintln!();
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "rvq {} bits: {} expert matrices, {} -> {} codes + {} codebooks (ratio {:.4}); {} tensors copied; {:.1} s",
        r.bits,
        r.expert_matrices,
        fmt_bytes(r.source_expert_bytes),
        fmt_bytes(r.rvq_expert_bytes),
        fmt_bytes(r.codebook_bytes),
        (r.rvq_expert_bytes + r.codebook_bytes) as f64 / r.source_expert_bytes.max(1) as f64,
        r.copied_tensors,
        r.seconds
    );
    for e in &r.errors {
        println!("  {}: relative RMS error {:.4}", e.mat, e.relative_rms);
    }
    println!(
        "wrote {} (lossy: its outputs differ from the source's)",
        r.out
    );
    Ok(ExitCode::SUCCESS)
}

fn print_report(r: &PackReport) {
    println!(
        "{:<10} {:>7} {:>6} {:>11} {:>11} {:>6} {:>8} {:>7} {:>8} {:>8} {:>6}",
        "class",
        "tensors",
        "packed",
        "bytes",
        "stored",
        "ratio",
        "raw blks",
        "H(exp)",
        "exp vals",
        "H(high)",
        "top15"
    );
    for c in &r.classes {
        let bf16 = c.stats.exponent_distinct > 0;
        println!(
            "{:<10} {:>7} {:>6} {:>11} {:>11} {:>6.4} {:>8} {:>7} {:>8} {:>8} {:>6}",
            c.class,
            c.tensors,
            if c.packed { "yes" } else { "no" },
            fmt_bytes(c.bytes),
            fmt_bytes(c.stored_bytes),
            c.stored_bytes as f64 / c.bytes.max(1) as f64,
            if c.packed {
                format!("{}/{}", c.raw_blocks, c.blocks)
            } else {
                "-".into()
            },
            if bf16 {
                format!("{:.3}", c.stats.exponent_entropy_bits)
            } else {
                "-".into()
            },
            if bf16 {
                c.stats.exponent_distinct.to_string()
            } else {
                "-".into()
            },
            if bf16 {
                format!("{:.3}", c.stats.high_byte_entropy_bits)
            } else {
                format!("B {:.3}", c.stats.byte_entropy_bits)
            },
            if bf16 {
                format!("{:.5}", c.stats.high_byte_top15_coverage)
            } else {
                "-".into()
            },
        );
    }
    println!(
        "packed tensors {} (codec {}, ratio {:.4} of their bytes), kept {}; {:.1} s",
        r.packed_tensors,
        r.codec,
        r.packed_ratio(),
        r.raw_tensors,
        r.seconds
    );
    match &r.out {
        Some(o) => println!(
            "wrote {o}: every packed tensor decoded from disk matched tensors.sha256 ({} tensors)",
            r.verified_tensors
        ),
        None => println!("--stats: nothing written"),
    }
}
