//! The engines as `run`'s plug-in: [`Registry`] implements
//! [`crate::sweep::run::plugin::EnginePlugin`].

use std::path::{Path, PathBuf};

use anyhow::Result;

use super::registry::Registry;
use crate::sweep::record::row::Row;
use crate::sweep::run::plugin::{EnginePlugin, Opaque, RunCtx, RunEngine};
use crate::sweep::run::runner::{ExtCommand, RunOutcome};
use crate::sweep::spec::{Point, Spec};

impl EnginePlugin for Registry {
    fn engine(&self, name: &str) -> Option<RunEngine> {
        self.get(name).map(|e| RunEngine {
            name: e.name.to_string(),
            is_memdial: e.is_memdial(),
            wants_cgroup: e.budget.wants_cgroup(),
        })
    }

    fn prompt_text(&self, spec: &Spec, index: usize) -> Option<String> {
        super::runs::prompt_text(spec, index)
    }

    fn trunk_share(
        &self,
        name: &str,
        model: &Path,
        budget: u64,
        p: &Point,
        context: usize,
    ) -> Option<u64> {
        super::runs::trunk_share(self.get(name)?, model, budget, p, context)
    }

    fn cold_files(&self, name: &str, c: &RunCtx) -> Vec<PathBuf> {
        self.get(name)
            .map(|e| super::runs::cold_files(self, e, c))
            .unwrap_or_default()
    }

    fn command(&self, name: &str, c: &RunCtx) -> Result<Option<ExtCommand>> {
        let e = self
            .get(name)
            .ok_or_else(|| anyhow::anyhow!("engine {name:?} is not in the spec"))?;
        if e.is_memdial() {
            return Ok(None);
        }
        Registry::command(self, e, c).map(Some)
    }

    fn finish_run(
        &self,
        name: &str,
        c: &RunCtx,
        o: &mut RunOutcome,
        row: &mut Row,
        in_cgroup: bool,
    ) {
        if let Some(e) = self.get(name) {
            super::runs::finish_run(self, e, c, o, row, in_cgroup);
        }
    }

    fn opaque(&self) -> Option<Opaque<'_>> {
        self.opaque.as_ref().map(|m| Opaque {
            path: &m.path,
            files: &m.files,
            bytes: m.bytes,
        })
    }

    fn floor_of(&self, name: &str, io: memdial::io::IoMode) -> Option<u64> {
        Registry::floor_of(self, name, io)
    }

    fn not_applicable(
        &self,
        name: &str,
        spec: &Spec,
        p: &Point,
        budget: u64,
        model_bytes: u64,
    ) -> Option<String> {
        let e = self.get(name)?;
        Registry::not_applicable(self, e, spec, p, budget, model_bytes)
    }
}
