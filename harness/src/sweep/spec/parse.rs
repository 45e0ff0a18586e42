//! Reading a spec: TOML into a [`RawSpec`], paths made relative to the spec file,
//! then [`Spec::from_raw`].

use std::path::Path;

use anyhow::{Context, Result};

use super::{PromptSpec, RawSpec, Spec};

impl Spec {
    /// Parses and validates a spec. `base` is the directory relative prompt files are
    /// resolved against (they are made absolute here).
    pub fn parse(text: &str, base: &Path) -> Result<Self> {
        let mut s: RawSpec = toml::from_str(text).context("invalid sweep spec")?;
        for p in &mut s.prompts {
            if let PromptSpec::File { file } = p {
                if file.is_relative() {
                    *file = base.join(&*file);
                }
            }
        }
        crate::sweep::speculate::resolve(&mut s.speculate.0, base);
        for f in [&mut s.trace, &mut s.iobench, &mut s.resident_metrics]
            .into_iter()
            .flatten()
        {
            if f.is_relative() {
                *f = base.join(&*f);
            }
        }
        Spec::from_raw(s)
    }

    /// Reads a spec file.
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read spec {}", path.display()))?;
        let base = path.parent().unwrap_or(Path::new("."));
        Self::parse(&text, base).with_context(|| format!("in {}", path.display()))
    }
}
