//! Writes a synthetic Kimi-style tokenizer (`tiktoken.model` + `tokenizer_config.json`) made of
//! the first N o200k_base ranks. Used by `fixtures/tokenizer/regen.sh`.
//!
//! Usage: `cargo run -p memdial --release --example write_tokenizer_files -- DIR N_BASE`

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 3 {
        anyhow::bail!("usage: {} DIR N_BASE", args[0]);
    }
    let n_base: u32 = args[2].parse()?;
    memdial::tools::fixture::vocab::write_tokenizer_files(std::path::Path::new(&args[1]), n_base)?;
    println!(
        "wrote {}/tiktoken.model and tokenizer_config.json (n_base = {n_base})",
        args[1]
    );
    Ok(())
}
