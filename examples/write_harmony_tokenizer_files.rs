//! Writes gpt-oss tokenizer files (`o200k_base.tiktoken`, `tokenizer.json`,
//! `tokenizer_config.json`, `chat_template.jinja`) made of the first N o200k_base ranks and
//! the harmony special tokens. Used by `fixtures/tokenizer/harmony/regen.sh`.
//!
//! Usage: `cargo run -p memdial --release --example write_harmony_tokenizer_files -- DIR N_BASE [published|after:COUNT]`

use memdial::tools::fixture::harmony_vocab::{write_harmony_tokenizer_files, SpecialLayout};

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let layout = match args.get(3).map(String::as_str) {
        None | Some("published") => SpecialLayout::Published,
        Some(n) => match n.strip_prefix("after:").map(str::parse) {
            Some(Ok(count)) => SpecialLayout::AfterRanks(count),
            _ => anyhow::bail!("layout must be published or after:COUNT, got {n:?}"),
        },
    };
    if !(3..=4).contains(&args.len()) {
        anyhow::bail!("usage: {} DIR N_BASE [published|after:COUNT]", args[0]);
    }
    let n_base: u32 = args[2].parse()?;
    write_harmony_tokenizer_files(std::path::Path::new(&args[1]), n_base, layout)?;
    println!(
        "wrote gpt-oss tokenizer files to {} (n_base = {n_base}, {layout:?})",
        args[1]
    );
    Ok(())
}
