//! `memdial tokenize`: encode text to Kimi token ids, or decode ids, with a checkpoint's
//! tokenizer (`tiktoken.model` + `tokenizer_config.json` in `--model`).

use std::path::PathBuf;

use anyhow::{bail, Result};
use memdial::tokenizer::Tokenizer;

/// Arguments of `memdial tokenize`.
#[derive(clap::Args, Debug, Clone)]
pub struct TokenizeArgs {
    /// Directory holding `tiktoken.model` and `tokenizer_config.json`.
    #[arg(long)]
    pub model: PathBuf,
    /// Text to encode (special-token strings such as `<|im_end|>` become their ids).
    #[arg(long, conflicts_with_all = ["file", "decode"])]
    pub text: Option<String>,
    /// File whose UTF-8 contents to encode.
    #[arg(long, conflicts_with = "decode")]
    pub file: Option<PathBuf>,
    /// Comma-separated ids to decode, e.g. `--decode 1,2,3`.
    #[arg(long, value_delimiter = ',')]
    pub decode: Option<Vec<u32>>,
    /// Encode special-token strings as plain text instead of special ids.
    #[arg(long)]
    pub no_special: bool,
}

/// Runs the subcommand: prints a JSON array of ids (encode) or a JSON string (decode).
///
/// When `--model` also holds a `config.json`, decoding accepts every id below its
/// `vocab_size`: ids of a padded vocabulary (past the tokenizer's ids) decode to "".
pub fn run(args: &TokenizeArgs) -> Result<()> {
    let tok = Tokenizer::from_dir(&args.model)?;
    if let Some(ids) = &args.decode {
        let vocab_size = if args.model.join("config.json").exists() {
            memdial::config::load_config(&args.model)?.vocab_size
        } else {
            tok.n_vocab() as usize
        };
        let text = tok.decode_padded(ids, vocab_size)?;
        println!("{}", serde_json::to_string(&text)?);
        return Ok(());
    }
    let text = match (&args.text, &args.file) {
        (Some(t), None) => t.clone(),
        (None, Some(f)) => crate::args::read_text_file("--file", f)?,
        _ => bail!("give exactly one of --text, --file or --decode"),
    };
    let ids = tok.encode(&text, !args.no_special);
    println!("{}", serde_json::to_string(&ids)?);
    Ok(())
}
