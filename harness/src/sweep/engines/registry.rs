//! The spec's engines resolved: adapter definitions merged with the spec's
//! `[engine.NAME]` tables, binaries found, versions read, setup steps run (once per
//! model, cached), and which points each engine can run.

use std::path::{Path, PathBuf};

use crate::sweep::record::engine_meta::EngineMeta;
use anyhow::{bail, Context, Result};

use crate::sweep::spec::engines::def::{bin_env, how_to_build, BudgetHold, EngineDef};
use crate::sweep::spec::engines::template::Vars;
use crate::sweep::spec::{EngineName, Spec};

/// Scripts of the built-in adapters, embedded so a sweep works outside the repository
/// (written to `<run dir>/engines/scripts/` when used).
const SCRIPTS: &[(&str, &str)] = &[
    (
        "mlx_generate.py",
        include_str!("../../../../fixtures/oracle/mlx_generate.py"),
    ),
    (
        "mlx_logits.py",
        include_str!("../../../../fixtures/oracle/mlx_logits.py"),
    ),
    (
        "common.py",
        include_str!("../../../../fixtures/oracle/common.py"),
    ),
];

/// One engine of the sweep.
#[derive(Debug, Clone)]
pub struct Engine {
    /// Name on the `engines` axis.
    pub name: EngineName,
    /// Built-in adapter (`memdial`, `mlx-lm`, `kimi-k3-in-c`, `llama.cpp`,
    /// `llama.cpp-f32`, `command`).
    pub adapter: String,
    /// The merged definition.
    pub def: EngineDef,
    /// How the budget is held.
    pub budget: BudgetHold,
    /// Ids must equal the reference engine's.
    pub must_match: bool,
    /// The binary (`{bin}`), when the adapter has one.
    pub bin: Option<PathBuf>,
    /// Python for `{python}`.
    pub python: Option<PathBuf>,
    /// Version or commit (empty until [`Registry::prepare`]; may be filled from the
    /// engine's output per run).
    pub version: String,
    /// Setup directory of this model (after [`Registry::prepare`]).
    pub setup_dir: Option<PathBuf>,
    /// Why this engine runs no point of this model (e.g. an adapter that needs a
    /// checkpoint memdial reads, given an opaque model): every point is `n/a`.
    pub not_here: Option<String>,
}

impl Engine {
    /// Whether this is memdial itself (run through `memdial run`).
    pub fn is_memdial(&self) -> bool {
        self.adapter == "memdial"
    }
}

/// The engines of one spec.
#[derive(Debug, Clone)]
pub struct Registry {
    /// In axis order.
    pub engines: Vec<Engine>,
    /// The reference engine's name.
    pub reference: EngineName,
    /// Eos ids of the model (for `{eos_ids}`).
    pub eos_ids: Vec<u32>,
    /// `--ignore-eos` is in the spec's extra_args.
    pub ignore_eos: bool,
    /// config.json's `model_type` and `num_hidden_layers` (after [`Registry::prepare`]).
    pub model_type: String,
    /// Layers of the model.
    pub num_layers: usize,
    /// kimi-k3-in-c's smallest expert cache on this model: top-k + 2 routed experts
    /// (it refuses fewer than top-k + 1 slots; one more covers its slot size being a
    /// little larger than memdial's expert buffer), bytes; 0 until [`Registry::set_model`] or when no
    /// engine uses the kimi-k3-in-c placeholders.
    pub k3c_min_cache_bytes: u64,
    /// Where the embedded scripts were written.
    pub scripts_dir: Option<PathBuf>,
    /// The model when memdial's engine does not read it ([`Registry::set_opaque`]).
    pub opaque: Option<OpaqueModel>,
    /// Floors of the engines on an opaque model, bytes, by (engine, IO mode), with
    /// where each came from ([`super::floor`]).
    pub floors: std::collections::BTreeMap<(String, String), super::opaque::Floor>,
}

use super::opaque::OpaqueModel;
use crate::sweep::run::plugin::RunCtx;
use crate::sweep::run::runner::ExtCommand;
use crate::sweep::spec::engines::def::{toml_key, uses, K3C_OVERHEAD_BYTES};
use crate::sweep::spec::engines::resolve::{default_python, resolve_def};

impl Registry {
    /// The engines of `spec` (definitions only; nothing is run).
    pub fn from_spec(spec: &Spec) -> Result<Registry> {
        let mut engines = vec![];
        for name in &spec.engines {
            let def = resolve_def(&spec.engine, name)?;
            let adapter = def.adapter.clone().unwrap_or_else(|| "command".into());
            let bin = def.bin.clone().map(PathBuf::from).or_else(|| {
                bin_env(&adapter)
                    .and_then(std::env::var_os)
                    .map(PathBuf::from)
            });
            let python =
                def.python.clone().map(PathBuf::from).or_else(|| {
                    (adapter == "mlx-lm" || uses(&def, "{python}")).then(default_python)
                });
            engines.push(Engine {
                name: name.clone(),
                budget: def.budget.unwrap_or(BudgetHold::Cgroup),
                must_match: def.must_match.unwrap_or(true),
                version: if adapter == "memdial" {
                    format!("memdial {}", env!("CARGO_PKG_VERSION"))
                } else {
                    String::new()
                },
                adapter,
                def,
                bin,
                python,
                setup_dir: None,
                not_here: None,
            });
        }
        let reference = spec
            .reference_engine
            .clone()
            .or_else(|| spec.engines.iter().find(|e| *e == "memdial").cloned())
            .unwrap_or_else(|| spec.engines[0].clone());
        Ok(Registry {
            engines,
            reference,
            eos_ids: vec![],
            model_type: String::new(),
            num_layers: 0,
            k3c_min_cache_bytes: 0,
            ignore_eos: spec.extra_args.iter().any(|a| a == "--ignore-eos"),
            scripts_dir: None,
            opaque: None,
            floors: Default::default(),
        })
    }

    /// The floor of engine `name` at IO mode `io` on an opaque model, bytes.
    pub fn floor_of(&self, name: &str, io: memdial::io::IoMode) -> Option<u64> {
        self.floors
            .get(&(name.to_string(), io.as_str().to_string()))
            .map(|f| f.bytes)
    }

    /// Engine `name`.
    pub fn get(&self, name: &str) -> Option<&Engine> {
        self.engines.iter().find(|e| e.name == name)
    }

    /// Whether the sweep has engines other than memdial.
    pub fn has_external(&self) -> bool {
        self.engines.iter().any(|e| !e.is_memdial())
    }

    /// What each engine is, for `sweep.json` (only when the spec has several engines
    /// or a non-memdial one).
    pub fn meta(&self) -> Vec<EngineMeta> {
        if self.engines.len() < 2 && !self.has_external() {
            return vec![];
        }
        self.engines
            .iter()
            .map(|e| EngineMeta {
                name: e.name.to_string(),
                adapter: e.adapter.clone(),
                version: e.version.clone(),
                must_match: e.must_match,
                reference: e.name == self.reference,
                budget: e.budget.as_str().into(),
                settings: settings(e),
            })
            .collect()
    }

    /// Problems that stop engine `e` from running here: a missing binary or python,
    /// each with how to get it. Empty when it can run.
    pub fn missing(&self, e: &Engine) -> Vec<String> {
        let mut v = vec![];
        if e.is_memdial() {
            return v;
        }
        if uses(&e.def, "{bin}") {
            match &e.bin {
                None => v.push(format!(
                    "engine {:?}: no binary: set {} (or `bin` in [engine.{}]); to build it: {}",
                    e.name,
                    bin_env(&e.adapter).unwrap_or("`bin`"),
                    toml_key(&e.name),
                    how_to_build(&e.adapter)
                )),
                Some(b) if !b.is_file() => v.push(format!(
                    "engine {:?}: binary {} does not exist; to build it: {}",
                    e.name,
                    b.display(),
                    how_to_build(&e.adapter)
                )),
                _ => {}
            }
        }
        if let Some(p) = &e.python {
            if !p.exists() {
                v.push(format!(
                    "engine {:?}: python {} does not exist; {}",
                    e.name,
                    p.display(),
                    how_to_build("mlx-lm")
                ));
            }
        }
        if v.is_empty() {
            v.extend(self.unstartable(e));
        }
        v
    }

    /// The programs of engine `e` (its command's, setup step's and version command's
    /// first word, placeholders expanded) that cannot start
    /// ([`super::program::cannot_start`]), each named with its key. A program named by
    /// a placeholder that has no value yet (`{setup_dir}/bin/x`, made by the setup
    /// step) is not checked.
    fn unstartable(&self, e: &Engine) -> Vec<String> {
        let vars = self.base_vars(e, Path::new(""));
        let lists = [
            ("command", &e.def.command),
            ("setup", &e.def.setup),
            ("version_command", &e.def.version_command),
        ];
        let mut v = vec![];
        for (key, list) in lists {
            let Some(first) = list.as_ref().and_then(|l| l.first()) else {
                continue;
            };
            let Ok(program) = vars.expand(first) else {
                continue;
            };
            if let Some(why) = super::program::cannot_start(&program) {
                v.push(format!(
                    "engine {:?}: {key}[0] {first:?} cannot start: {why}",
                    e.name
                ));
            }
        }
        // An ids file at a fixed path is removed before each run: only a regular one.
        if let Some(p) = e.def.ids_json.as_ref().and_then(|t| vars.expand(t).ok()) {
            if std::fs::symlink_metadata(&p).is_ok_and(|m| !m.is_file() && !m.is_symlink()) {
                v.push(format!(
                    "engine {:?}: ids_json {p} is not a regular file (a directory, FIFO or device): \
                     it is removed before each run, so give a file path",
                    e.name
                ));
            }
        }
        v
    }

    /// Reads the model facts templates and applicability need (eos ids, model type,
    /// layers) from `model`'s config.json.
    pub fn set_model(&mut self, model: &Path) -> Result<()> {
        if let Some(m) = &self.opaque {
            self.eos_ids = m.eos_ids.clone();
            self.model_type = m.model_type.clone();
            self.num_layers = 0;
            return Ok(());
        }
        let cfg = memdial::format::config::load_config(model)?;
        self.eos_ids = cfg.eos_token_ids.clone();
        self.model_type = cfg.model_type.clone();
        self.num_layers = cfg.num_hidden_layers;
        if self.engines.iter().any(|e| uses(&e.def, "{k3c_")) {
            let ck = memdial::format::checkpoint::Checkpoint::open(model)?;
            let plan = memdial::store::plan::plan_unchecked(
                &cfg,
                &ck,
                u64::MAX / 4,
                memdial::io::IoMode::Direct,
                memdial::store::plan::Prefetch::None,
                memdial::engine::arena::Scratch::activations(
                    &cfg,
                    memdial::store::plan::Sequences::single(1),
                    1,
                ),
            )?;
            self.k3c_min_cache_bytes =
                (cfg.routed_experts().map_or(0, |(_, k)| k) as u64 + 2) * plan.expert_buffer_bytes;
        }
        Ok(())
    }

    /// A usage error listing every missing binary or python with how to get it.
    pub fn require_available(&self) -> Result<()> {
        let missing: Vec<String> = self.engines.iter().flat_map(|e| self.missing(e)).collect();
        if !missing.is_empty() {
            return Err(crate::args::usage(missing.join("\n")));
        }
        Ok(())
    }

    /// Readies the engines for a sweep writing into `out`: checks binaries (a missing
    /// one is a usage error naming how to build it), writes the embedded scripts, runs
    /// each setup step once per model (cached by `content_hash`), reads versions.
    pub fn prepare(&mut self, out: &Path, model: &Path, content_hash: &str) -> Result<()> {
        self.set_model(model)?;
        self.require_available()?;
        if self.engines.iter().any(|e| {
            e.def
                .command
                .iter()
                .flatten()
                .any(|a| a.contains("{scripts}"))
        }) {
            let d = out.join("engines").join("scripts");
            std::fs::create_dir_all(&d)?;
            for (name, text) in SCRIPTS {
                std::fs::write(d.join(name), text)?;
            }
            self.scripts_dir = Some(d);
        }
        // Engines of one adapter with the same setup (settings variants) share its output.
        let mut done: Vec<((String, Vec<String>), PathBuf)> = vec![];
        for i in 0..self.engines.len() {
            let e = self.engines[i].clone();
            if e.is_memdial() {
                continue;
            }
            let mut vars = self.base_vars(&e, model);
            let runs_here = e.not_here.is_none()
                && e.def
                    .model_types
                    .as_ref()
                    .is_none_or(|t| t.contains(&self.model_type));
            if let (Some(setup), true) = (&e.def.setup, runs_here) {
                let key = (e.adapter.clone(), setup.clone());
                let dir = match done.iter().find(|(k, _)| *k == key) {
                    Some((_, d)) => d.clone(),
                    None => {
                        let dir = setup_dir(&e.name, content_hash);
                        vars.set("setup_dir", dir.display());
                        super::setup::run_setup(&e.name, setup, &vars, &dir)?;
                        done.push((key, dir.clone()));
                        dir
                    }
                };
                vars.set("setup_dir", dir.display());
                self.engines[i].setup_dir = Some(dir);
            }
            let version = match &e.def.version_command {
                Some(cmd) => super::setup::first_line_of(&vars.expand_args(cmd)?),
                None => None,
            };
            self.engines[i].version = version
                .or_else(|| e.bin.as_deref().and_then(super::setup::file_sha_label))
                .unwrap_or_default();
        }
        Ok(())
    }

    /// Takes `m` as the sweep's model (memdial's engine does not read it): the
    /// `llama.cpp` adapter runs its GGUF directly (no setup step, any architecture),
    /// unless the spec's `[engine.NAME]` table sets `model`, `setup` or `model_types`;
    /// adapters that need a checkpoint memdial reads (`llama.cpp-f32`, whose setup
    /// widens one, and `kimi-k3-in-c`, whose trunk share is memdial's plan) run no
    /// point of it.
    pub fn set_opaque(&mut self, spec: &Spec, m: OpaqueModel) {
        for e in &mut self.engines {
            let table = spec
                .engine
                .get(e.name.as_str())
                .cloned()
                .unwrap_or_default();
            match e.adapter.as_str() {
                "llama.cpp" => {
                    if table.model.is_none() {
                        match &m.gguf {
                            Some(g) => e.def.model = Some(g.display().to_string()),
                            None => {
                                e.def.model = None;
                                e.not_here = Some(format!(
                                    "{} runs a GGUF: {} is none and holds none",
                                    e.name,
                                    m.path.display()
                                ));
                            }
                        }
                    }
                    if table.setup.is_none() {
                        e.def.setup = None;
                    }
                    if table.model_types.is_none() {
                        e.def.model_types = None;
                    }
                }
                "llama.cpp-f32" | "kimi-k3-in-c"
                    if (e.adapter == "kimi-k3-in-c" && uses(&e.def, "{k3c_"))
                        || (e.adapter == "llama.cpp-f32" && table.setup.is_none()) =>
                {
                    e.not_here = Some(format!(
                        "{} needs a checkpoint memdial reads ({}); {} is not one",
                        e.name,
                        if e.adapter == "kimi-k3-in-c" {
                            "its trunk share is memdial's plan"
                        } else {
                            "its setup widens it to an F32 GGUF"
                        },
                        m.path.display()
                    ));
                }
                _ => {}
            }
        }
        self.opaque = Some(m);
    }

    /// The placeholder values of engine `e` that do not depend on a run (`{bin}`,
    /// `{model}`, `{python}`, `{eos_ids}`, …) for the model at `model`.
    pub fn vars_for(&self, e: &Engine, model: &Path) -> Vars {
        self.base_vars(e, model)
    }

    fn base_vars(&self, e: &Engine, model: &Path) -> Vars {
        let mut v = Vars::default();
        v.set("model_dir", model.display());
        v.set("model", model.display());
        if let Some(b) = &e.bin {
            v.set("bin", b.display());
            let dir = b.parent().unwrap_or(Path::new("."));
            v.set("bin_dir", dir.display());
        }
        if let Some(p) = &e.python {
            v.set("python", p.display());
        }
        if let Some(s) = &self.scripts_dir {
            v.set("scripts", s.display());
        }
        if let Some(s) = &e.setup_dir {
            v.set("setup_dir", s.display());
        }
        if let Ok(me) = std::env::current_exe() {
            v.set("memdial", me.display());
        }
        v.set("model_type", &self.model_type);
        v.set("num_layers", self.num_layers);
        let eos: Vec<u32> = if self.ignore_eos {
            vec![]
        } else {
            self.eos_ids.clone()
        };
        v.set("eos_ids", join(&eos, ","));
        v.set(
            "eos_id",
            eos.first().map(|x| *x as i64).unwrap_or(-1).to_string(),
        );
        v
    }

    /// The child command of engine `e` for one run.
    pub fn command(&self, e: &Engine, c: &RunCtx) -> Result<ExtCommand> {
        let vars = self.run_vars(e, c)?;
        let t = e
            .def
            .command
            .as_ref()
            .with_context(|| format!("engine {:?} has no command", e.name))?;
        let mut args = vars.expand_args(t)?;
        if args.is_empty() {
            bail!("engine {:?}: empty command", e.name);
        }
        let program = PathBuf::from(args.remove(0));
        let env = e
            .def
            .env
            .iter()
            .map(|(k, v)| Ok((k.clone(), vars.expand(v)?)))
            .collect::<Result<Vec<_>>>()?;
        let outputs = [&e.def.ids_json, &e.def.text_file]
            .into_iter()
            .flatten()
            .map(|t| Ok(PathBuf::from(vars.expand(t)?)))
            .collect::<Result<Vec<_>>>()?;
        Ok(ExtCommand {
            program,
            args,
            env,
            outputs,
        })
    }

    /// The placeholder values of one run.
    pub fn run_vars(&self, e: &Engine, c: &RunCtx) -> Result<Vars> {
        let mut v = self.base_vars(e, c.model_dir);
        let b = c.budget_bytes as f64;
        v.set("prompt_ids", join(c.prompt_ids, ","))
            .set("prompt_ids_space", join(c.prompt_ids, " "))
            .set("prompt_tokens", c.prompt_ids.len())
            .set("prompt_text", c.prompt_text.unwrap_or(""))
            .set("max_tokens", c.max_tokens)
            .set("threads", c.point.threads)
            .set("budget_bytes", c.budget_bytes)
            .set("budget_mib", format!("{:.2}", b / 1048576.0))
            .set("budget_gib", format!("{:.3}", b / 1073741824.0))
            .set("budget_gb", format!("{:.3}", b / 1e9))
            .set("io", c.point.io.as_str())
            .set("prefetch", c.point.prefetch.as_str())
            .set("start", c.point.start.as_str())
            .set("run_dir", c.run_dir.display());
        if let Some(t) = c.trunk_share_bytes {
            // kimi-k3-in-c: the trunk ring gets memdial's pinned + slot bytes, capped so
            // the expert cache keeps its top-k + 2 slots; the cache gets the rest after
            // the engine's fixed overhead (≈144 MB measured on mini).
            let room = c
                .budget_bytes
                .saturating_sub(K3C_OVERHEAD_BYTES)
                .saturating_sub(self.k3c_min_cache_bytes);
            let t = t.min(room);
            let cache = c
                .budget_bytes
                .saturating_sub(K3C_OVERHEAD_BYTES)
                .saturating_sub(t);
            v.set("k3c_trunk_gb", format!("{:.4}", t as f64 / 1e9));
            v.set("k3c_cache_gb", format!("{:.4}", cache as f64 / 1e9));
        }
        if let Some(m) = &e.def.model {
            let m = v.expand(m)?;
            v.set("model", m);
        }
        if let Some(io) = &e.def.io {
            v.io_args = io.get(c.point.io.as_str()).cloned().unwrap_or_default();
        }
        Ok(v)
    }
}

/// The cached setup directory of engine `name` for the model of `content_hash`
/// (an opaque model's: its files' identity digest).
pub fn setup_dir(name: &str, content_hash: &str) -> PathBuf {
    super::setup::setup_cache()
        .join(sanitize(name))
        .join(&content_hash[..content_hash.len().min(16)])
}

fn join(ids: &[u32], sep: &str) -> String {
    ids.iter()
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(sep)
}

fn sanitize(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// [`EngineMeta::settings`] of `e`: its environment and its per-IO-mode arguments.
fn settings(e: &Engine) -> std::collections::BTreeMap<String, String> {
    let mut m = std::collections::BTreeMap::new();
    if e.is_memdial() {
        return m;
    }
    for (k, v) in &e.def.env {
        m.insert(format!("env:{k}"), v.clone());
    }
    for (mode, args) in e.def.io.iter().flatten() {
        m.insert(format!("io:{mode}"), args.join(" "));
    }
    m
}
