//! `memdial tokenize`: encode text to token ids, or decode ids, with a checkpoint's
//! tokenizer: Kimi's (`tiktoken.model` + `tokenizer_config.json` in `--model`), a gpt-oss
//! `*.tiktoken` ranks file, else a Hugging Face `tokenizer.json` (`--model` is the file or a
//! directory holding it; a gpt-oss one gives the ids memdial's reader gives).

use std::path::PathBuf;

use anyhow::{bail, Result};
use memdial::format::tokenizer::Tokenizer;

/// Arguments of `memdial tokenize`.
#[derive(clap::Args, Debug, Clone)]
pub struct TokenizeArgs {
    /// Directory holding `tiktoken.model` and `tokenizer_config.json`, or a gpt-oss
    /// `*.tiktoken` ranks file, or a Hugging Face `tokenizer.json` (the file, or a
    /// directory holding it).
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
    /// Kimi's tokenizer: encode special-token strings as plain text instead of special
    /// ids. A `tokenizer.json`: add no post-processor tokens (BOS etc.), and leave
    /// special tokens out when decoding.
    #[arg(long)]
    pub no_special: bool,
}

/// Runs the subcommand: prints a JSON array of ids (encode) or a JSON string (decode).
///
/// When `--model` also holds a `config.json`, decoding accepts every id below its
/// `vocab_size`: ids of a padded vocabulary (past the tokenizer's ids) decode to "".
pub fn run(args: &TokenizeArgs) -> Result<()> {
    if !args.model.join("tiktoken.model").exists()
        && crate::hf_tokenizer::find(&args.model).is_some()
    {
        return run_hf(args);
    }
    let tok = Tokenizer::from_dir(&args.model)?;
    if let Some(ids) = &args.decode {
        let vocab_size = if args.model.join("config.json").exists() {
            memdial::format::config::load_config(&args.model)?.vocab_size
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

/// `memdial tokenize` with a Hugging Face `tokenizer.json`: ids as `tokenizer(text)`
/// gives them (with the post-processor's tokens unless `--no-special`).
fn run_hf(args: &TokenizeArgs) -> Result<()> {
    let tok = crate::hf_tokenizer::HfTokenizer::open(&args.model)?;
    if let Some(ids) = &args.decode {
        let text = tok.decode(ids, args.no_special)?;
        println!("{}", serde_json::to_string(&text)?);
        return Ok(());
    }
    let text = match (&args.text, &args.file) {
        (Some(t), None) => t.clone(),
        (None, Some(f)) => crate::args::read_text_file("--file", f)?,
        _ => bail!("give exactly one of --text, --file or --decode"),
    };
    let ids = tok.encode(&text, !args.no_special)?;
    println!("{}", serde_json::to_string(&ids)?);
    Ok(())
}
