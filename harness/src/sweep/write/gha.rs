//! GitHub Actions: the job summary (`$GITHUB_STEP_SUMMARY`, Markdown appended) and
//! workflow-command annotations (`::error title=…::message`) a sweep and a merge write
//! when `GITHUB_ACTIONS=true`.
//!
//! Escaping follows GitHub's workflow-command rules (as the actions toolkit's
//! `escapeData` / `escapeProperty` do): in a message `%`, `\r`, `\n` become `%25`,
//! `%0D`, `%0A`; in a property (the title) also `:` and `,` become `%3A`, `%2C`.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};

/// Whether this process runs as a GitHub Actions step (`GITHUB_ACTIONS=true`).
pub fn enabled() -> bool {
    std::env::var("GITHUB_ACTIONS").is_ok_and(|v| v == "true")
}

/// Severity of an annotation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Error,
    Warning,
}

/// One workflow command line, e.g. `::error title=Output mismatch::ids differ`.
pub fn annotation(level: Level, title: &str, message: &str) -> String {
    let cmd = match level {
        Level::Error => "error",
        Level::Warning => "warning",
    };
    format!(
        "::{cmd} title={}::{}",
        escape_property(title),
        escape_data(message)
    )
}

/// A message escaped for a workflow command.
pub fn escape_data(s: &str) -> String {
    s.replace('%', "%25")
        .replace('\r', "%0D")
        .replace('\n', "%0A")
}

/// A property value (a title) escaped for a workflow command.
pub fn escape_property(s: &str) -> String {
    escape_data(s).replace(':', "%3A").replace(',', "%2C")
}

/// Appends `markdown` (and a newline) to the file `$GITHUB_STEP_SUMMARY` names.
/// `Ok(false)` when the variable is unset or empty (nothing to write to).
///
/// Errors: the file cannot be opened for appending or written (naming it).
pub fn append_summary(markdown: &str) -> Result<bool> {
    let Some(p) = std::env::var_os("GITHUB_STEP_SUMMARY").filter(|p| !p.is_empty()) else {
        return Ok(false);
    };
    let p = PathBuf::from(p);
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(&p)
        .with_context(|| format!("cannot open GITHUB_STEP_SUMMARY {}", p.display()))?;
    f.write_all(markdown.as_bytes())
        .and_then(|_| f.write_all(b"\n"))
        .with_context(|| format!("cannot write GITHUB_STEP_SUMMARY {}", p.display()))?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_escaped_as_github_specifies() {
        assert_eq!(
            annotation(
                Level::Error,
                "Output mismatch: 50%, direct",
                "ids differ at 3\n100% done"
            ),
            "::error title=Output mismatch%3A 50%25%2C direct::ids differ at 3%0A100%25 done"
        );
        assert_eq!(
            annotation(Level::Warning, "a", "b\r\n"),
            "::warning title=a::b%0D%0A"
        );
    }
}
