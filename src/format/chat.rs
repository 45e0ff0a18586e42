//! Chat prompts from the checkpoint's own `chat_template`, rendered the way transformers'
//! `apply_chat_template` does, with the Kimi format built in as the fallback.
//!
//! transformers 5.24 (`utils/chat_template_utils.py`) renders the Jinja2 template in an
//! environment with `trim_blocks` and `lstrip_blocks`, the `loopcontrols` extension and a
//! `raise_exception` global. The context holds `messages` (`[{role, content}]`),
//! `add_generation_prompt`, `tools` / `documents` (unset here) and the special tokens of
//! `tokenizer_config.json` (`bos_token`, `eos_token`, `unk_token`, `pad_token`). The rendered
//! text is then encoded with special-token strings as special ids, so the markers a
//! template writes (`<|im_user|>`, …) become the ids that *this* checkpoint's
//! `tokenizer_config.json` gives them, whatever their names are.
//!
//! memdial renders with `minijinja` plus `minijinja-contrib`'s Python-compatibility methods
//! (`dict.get`, `str.strip`, …), which published HF templates use, and transformers'
//! `strftime_now(format)` global (gpt-oss's template writes `Current date: ` +
//! `strftime_now("%Y-%m-%d")`). Its clock is [`TemplateClock`]: now in local time, as
//! transformers' `datetime.now()`, or pinned by `SOURCE_DATE_EPOCH` (seconds since 1970, UTC).
//!
//! The template comes from `chat_template.jinja` in the checkpoint directory (where newer
//! transformers save it) or from `tokenizer_config.json` `chat_template` (a string, or a list of
//! `{name, template}` with the one named `default`). Without a template, the built-in Kimi
//! format is used ([`Tokenizer::try_chat_prompt`]).

use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};
use minijinja::{context, Environment, Error, ErrorKind};
use serde::Serialize;
use serde_json::Value;

use crate::format::tokenizer::{Tokenizer, TOKENIZER_CONFIG_FILE};

/// One chat message.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Message {
    /// `system`, `user` or `assistant`.
    pub role: String,
    /// The message text.
    pub content: String,
}

/// Where a chat template was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TemplateSource {
    /// `chat_template.jinja` in the checkpoint directory.
    JinjaFile,
    /// `tokenizer_config.json` → `chat_template`.
    TokenizerConfig,
}

/// The checkpoint's chat template, if it has one.
///
/// Errors: unreadable `chat_template.jinja`; `tokenizer_config.json` whose `chat_template`
/// is neither a string nor a list of `{name, template}` objects with a `default` entry.
pub fn find_template(dir: &Path) -> Result<Option<(String, TemplateSource)>> {
    let jinja = dir.join("chat_template.jinja");
    if jinja.exists() {
        let t = std::fs::read_to_string(&jinja)
            .with_context(|| format!("cannot read {}", jinja.display()))?;
        return Ok(Some((t, TemplateSource::JinjaFile)));
    }
    let path = dir.join(TOKENIZER_CONFIG_FILE);
    let Ok(text) = std::fs::read_to_string(&path) else {
        return Ok(None);
    };
    let cfg: Value =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    let t = match cfg.get("chat_template") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(list)) => list
            .iter()
            .find(|e| e.get("name").and_then(Value::as_str) == Some("default"))
            .and_then(|e| e.get("template").and_then(Value::as_str))
            .with_context(|| {
                format!(
                    "{}: chat_template is a list without a \"default\" template",
                    path.display()
                )
            })?
            .to_string(),
        Some(other) => bail!(
            "{}: chat_template must be a string or a list of {{name, template}}, got {other}",
            path.display()
        ),
    };
    Ok(Some((t, TemplateSource::TokenizerConfig)))
}

/// The time a template's `strftime_now` formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TemplateClock {
    /// The current time in the local time zone (transformers: `datetime.now()`).
    Now,
    /// This many seconds since 1970-01-01 00:00 UTC, formatted in UTC.
    Fixed(i64),
}

/// The name of the environment variable that pins [`TemplateClock`] (the reproducible-builds
/// convention: integer seconds since the epoch, UTC).
pub const SOURCE_DATE_EPOCH: &str = "SOURCE_DATE_EPOCH";

impl TemplateClock {
    /// [`TemplateClock::Fixed`] from `SOURCE_DATE_EPOCH` when it is set, else
    /// [`TemplateClock::Now`]. Errors: the variable is not an integer.
    pub fn from_env() -> Result<Self> {
        match std::env::var(SOURCE_DATE_EPOCH) {
            Err(_) => Ok(TemplateClock::Now),
            Ok(v) => v.trim().parse().map(TemplateClock::Fixed).map_err(|_| {
                anyhow!("{SOURCE_DATE_EPOCH}={v:?} is not an integer number of seconds")
            }),
        }
    }

    /// `format` with C `strftime` codes (those Python's `datetime.strftime` hands to it on
    /// Linux, e.g. `%Y-%m-%d`, `%d %B %Y`; C locale) at this clock's time.
    ///
    /// Errors: `format` holds a NUL byte, or the time is out of range.
    pub fn strftime(self, format: &str) -> std::result::Result<String, String> {
        let fmt = std::ffi::CString::new(format)
            .map_err(|_| format!("strftime_now: format {format:?} holds a NUL byte"))?;
        // SAFETY: `tm` is plain data filled by gmtime_r / localtime_r from a valid time_t;
        // strftime writes at most `buf.len()` bytes into `buf` and returns the count written.
        unsafe {
            let mut tm: libc::tm = std::mem::zeroed();
            let ok = match self {
                TemplateClock::Now => {
                    let t = libc::time(std::ptr::null_mut());
                    !libc::localtime_r(&t, &mut tm).is_null()
                }
                TemplateClock::Fixed(s) => {
                    let t = s as libc::time_t;
                    !libc::gmtime_r(&t, &mut tm).is_null()
                }
            };
            if !ok {
                return Err(format!("strftime_now: the time {self:?} is out of range"));
            }
            // No C conversion writes more than 64 bytes per format byte, so 0 means empty.
            let mut buf = vec![0u8; 64 * format.len() + 64];
            let n = libc::strftime(buf.as_mut_ptr().cast(), buf.len(), fmt.as_ptr(), &tm);
            buf.truncate(n);
            String::from_utf8(buf).map_err(|_| format!("strftime_now({format:?}): not UTF-8"))
        }
    }
}

/// Renders `template` for `messages` the way transformers' `apply_chat_template` does
/// (see the module docs); `tok` supplies `bos_token`, `eos_token`, `pad_token` and
/// `unk_token` (the names its `tokenizer_config.json` gives them). `strftime_now` reads
/// [`TemplateClock::from_env`].
///
/// Errors: a template that does not parse, calls `raise_exception`, or fails to render
/// (the message names the template line); a bad `SOURCE_DATE_EPOCH`.
pub fn render(
    template: &str,
    messages: &[Message],
    add_generation_prompt: bool,
    tok: &Tokenizer,
) -> Result<String> {
    render_at(
        template,
        messages,
        add_generation_prompt,
        tok,
        TemplateClock::from_env()?,
    )
}

/// [`render`] with `strftime_now` reading `clock`.
pub fn render_at(
    template: &str,
    messages: &[Message],
    add_generation_prompt: bool,
    tok: &Tokenizer,
    clock: TemplateClock,
) -> Result<String> {
    let mut env = Environment::new();
    env.set_trim_blocks(true);
    env.set_lstrip_blocks(true);
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.add_function("raise_exception", |msg: String| -> Result<String, Error> {
        Err(Error::new(ErrorKind::InvalidOperation, msg))
    });
    env.add_function("strftime_now", move |format: String| {
        clock
            .strftime(&format)
            .map_err(|e| Error::new(ErrorKind::InvalidOperation, e))
    });
    env.add_template("chat_template", template)
        .map_err(|e| anyhow!("chat_template does not parse: {e:#}"))?;
    let name = |id: Option<u32>| id.and_then(|i| tok.special_name(i)).map(str::to_string);
    let ctx = context! {
        messages => messages,
        add_generation_prompt => add_generation_prompt,
        bos_token => name(Some(tok.bos_id())),
        eos_token => name(Some(tok.eos_id())),
        pad_token => name(tok.pad_id()),
        unk_token => name(tok.unk_id()),
    };
    env.get_template("chat_template")
        .and_then(|t| t.render(ctx))
        .map_err(|e| anyhow!("rendering chat_template: {e:#}"))
}

/// Token ids of a single-turn chat prompt (optional system message, the user message, then
/// the generation prompt) for the checkpoint in `dir`: its own template rendered by
/// [`render`] and encoded with special tokens, or the built-in Kimi format
/// ([`Tokenizer::try_chat_prompt`]) when the checkpoint has no template.
///
/// Errors: see [`find_template`] and [`render`]; the built-in format needs the `<|im_*|>`
/// specials.
pub fn chat_prompt_ids(
    dir: &Path,
    tok: &Tokenizer,
    user: &str,
    system: Option<&str>,
) -> Result<Vec<u32>> {
    let Some((template, _)) = find_template(dir)? else {
        return tok.try_chat_prompt(user, system).context(
            "the checkpoint has no chat_template (chat_template.jinja or tokenizer_config.json) \
             and its tokenizer lacks the built-in Kimi markers",
        );
    };
    let mut messages = Vec::new();
    if let Some(s) = system {
        messages.push(Message {
            role: "system".into(),
            content: s.into(),
        });
    }
    messages.push(Message {
        role: "user".into(),
        content: user.into(),
    });
    let text = render(&template, &messages, true, tok)?;
    Ok(tok.encode(&text, true))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strftime_at_pinned_times() {
        // By hand: 1754395200 s = 20305 days + 12 h after 1970-01-01, i.e. Tuesday
        // 2025-08-05 12:00 UTC.
        let t = TemplateClock::Fixed(1_754_395_200);
        assert_eq!(t.strftime("%Y-%m-%d").unwrap(), "2025-08-05");
        assert_eq!(
            t.strftime("%A %d %B %Y, %H:%M:%S").unwrap(),
            "Tuesday 05 August 2025, 12:00:00"
        );
        assert_eq!(
            TemplateClock::Fixed(-1)
                .strftime("%Y-%m-%d %H:%M:%S")
                .unwrap(),
            "1969-12-31 23:59:59"
        );
        assert_eq!(t.strftime("").unwrap(), "");
        assert!(t.strftime("a\0b").unwrap_err().contains("NUL"));
        assert_eq!(TemplateClock::Now.strftime("%Y").unwrap().len(), 4);
    }
}
