//! Which points an engine can run: model types, kimi-k3-in-c's floor, resident-only
//! engines under the model size, IO modes and prefetch policies it lacks.

use super::registry::{Engine, Registry};
use crate::sweep::spec::engines::def::EngineDef;
use crate::sweep::spec::engines::def::{uses, K3C_OVERHEAD_BYTES};
use crate::sweep::spec::{Point, Spec};

impl Registry {
    /// Why engine `e` does not run at point `p` (budget `budget` bytes of a model of
    /// `model_bytes`), or `None` when it does: a resident-only engine under the model
    /// size, an IO mode or prefetch policy it does not have (engines without IO modes
    /// or prefetch run at the spec's first value only).
    pub fn not_applicable(
        &self,
        e: &Engine,
        spec: &Spec,
        p: &Point,
        budget: u64,
        model_bytes: u64,
    ) -> Option<String> {
        if let Some(why) = axes_na(e, p) {
            return Some(why);
        }
        if e.is_memdial() {
            return None;
        }
        if let Some(why) = &e.not_here {
            return Some(why.clone());
        }
        if let Some(why) = text_only_na(e, spec, p) {
            return Some(why);
        }
        if p.start == crate::sweep::start::StartMode::Warm && !e.def.warm.unwrap_or(false) {
            return Some(format!(
                "{} has no warm start (its adapter does not declare `warm = true`)",
                e.name
            ));
        }
        if let Some(types) = &e.def.model_types {
            if !types.contains(&self.model_type) {
                return Some(format!(
                    "{} runs {} models, this one is {}",
                    e.name,
                    types.join(", "),
                    self.model_type
                ));
            }
        }
        if uses(&e.def, "{k3c_") {
            let need = K3C_OVERHEAD_BYTES + self.k3c_min_cache_bytes;
            if budget < need {
                return Some(format!(
                    "{} needs at least {} (its fixed {} plus top-k + 2 expert cache slots), the budget is {}",
                    e.name,
                    memdial::util::units::fmt_bytes(need),
                    memdial::util::units::fmt_bytes(K3C_OVERHEAD_BYTES),
                    memdial::util::units::fmt_bytes(budget)
                ));
            }
        }
        let resident_here = e
            .def
            .resident_io
            .as_ref()
            .is_some_and(|m| m.iter().any(|x| x == p.io.as_str()));
        // A known floor of the engine at this IO mode (opaque models) decides instead:
        // points under it are `below_floor`.
        let floor_known = self.floor_of(&e.name, p.io).is_some();
        if (e.def.resident_only.unwrap_or(false) || resident_here) && !floor_known {
            let need = resident_need(&e.def, model_bytes);
            if budget < need {
                return Some(format!(
                    "{}{} holds the whole model: it needs {} (model × {} + runtime {}), the budget is {}",
                    e.name,
                    if resident_here {
                        format!(" at io = {:?}", p.io.as_str())
                    } else {
                        String::new()
                    },
                    memdial::util::units::fmt_bytes(need),
                    e.def.resident_factor.unwrap_or(1.0),
                    e.def.runtime_overhead.as_deref().unwrap_or("0"),
                    memdial::util::units::fmt_bytes(budget)
                ));
            }
        }
        match &e.def.io {
            Some(m) if !m.contains_key(p.io.as_str()) => {
                return Some(format!(
                    "{} has no IO mode {:?} (it has: {})",
                    e.name,
                    p.io.as_str(),
                    m.keys().cloned().collect::<Vec<_>>().join(", ")
                ))
            }
            None if spec.io.first() != Some(&p.io) => {
                return Some(format!(
                    "{} has no IO modes: run at io = {:?} only",
                    e.name,
                    spec.io.first().map(|v| v.as_str()).unwrap_or_default()
                ))
            }
            _ => {}
        }
        match &e.def.prefetch {
            Some(v) if !v.iter().any(|x| x == p.prefetch.as_str()) => Some(format!(
                "{} has no prefetch policy {:?}",
                e.name,
                p.prefetch.as_str()
            )),
            None if spec.prefetch.first() != Some(&p.prefetch) => Some(format!(
                "{} has no prefetch policies: run at prefetch = {:?} only",
                e.name,
                spec.prefetch
                    .first()
                    .map(|v| v.as_str())
                    .unwrap_or_default()
            )),
            _ if spec.cache.first() != Some(&p.cache) => Some(format!(
                "{} has no expert-cache policies: run at cache = {:?} only",
                e.name,
                spec.cache.first().map(|v| v.as_str()).unwrap_or_default()
            )),
            _ => None,
        }
    }
}

/// Memory a resident-only engine needs: model bytes × `resident_factor` +
/// `runtime_overhead`, bytes.
pub fn resident_need(d: &EngineDef, model_bytes: u64) -> u64 {
    let f = d.resident_factor.unwrap_or(1.0);
    let o = d
        .runtime_overhead
        .as_deref()
        .and_then(|s| memdial::util::budget::parse_size(s).ok())
        .unwrap_or(0);
    (model_bytes as f64 * f).ceil() as u64 + o
}

/// Why text-only engine `e` cannot run point `p`: its prompt is ids (or a file that
/// cannot be read), and it takes text.
fn text_only_na(e: &Engine, spec: &Spec, p: &Point) -> Option<String> {
    (e.def.output == Some(crate::sweep::spec::engines::def::OutputKind::Text)
        && super::runs::prompt_text(spec, p.prompt_index).is_none())
    .then(|| {
        format!(
            "{} is text-only (`output = \"text\"`): prompt {} is ids, or a file it cannot read",
            e.name, p.prompt_index
        )
    })
}

/// Why the point's `layout`, `speculate`, `depth` or `concurrency` coordinate rules
/// engine `e` out (only memdial reads the lossless layout, speculates, takes a depth
/// context and is served to concurrent clients).
fn axes_na(e: &Engine, p: &Point) -> Option<String> {
    if let Some(why) = crate::sweep::layout::not_applicable(e.is_memdial(), p.layout, p.io) {
        return Some(why);
    }
    if let Some(why) =
        crate::sweep::speculate::not_applicable(e.is_memdial(), p.speculate.as_deref())
    {
        return Some(why);
    }
    if let Some(why) = crate::sweep::depth::not_applicable(e.is_memdial(), p.depth) {
        return Some(why);
    }
    (!e.is_memdial() && p.concurrency > 1).then(|| {
        format!(
            "{} is run one request at a time (only memdial is served to concurrent clients)",
            e.name
        )
    })
}
