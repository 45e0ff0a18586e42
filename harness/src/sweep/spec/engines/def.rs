//! `[engine.NAME]` tables of a sweep spec ([`EngineDef`]) and the built-in adapters
//! they override ([`builtin`]).
//!
//! An adapter is a command template plus how to read what the command wrote:
//!
//! ```toml
//! engines = ["memdial", "mine"]
//! [engine.mine]
//! adapter = "command"
//! command = ["/opt/mine/bin/gen", "{model}", "--ids", "{prompt_ids}", "-n", "{max_tokens}",
//!            "--threads", "{threads}", "--out", "{run_dir}/out.json"]
//! ids_json = "{run_dir}/out.json"   # file the ids are read from …
//! ids_key = "tokens"                # … at this key (dotted path), or instead:
//! # ids_stdout_regex = "^ids: (.*)$" # first capture group of a stdout line
//! decode_key = "step_seconds"       # optional: per-token decode seconds (array)
//! ttft_key = "ttft"                 # optional: time to first token, seconds
//! budget = "cgroup"                 # flag | cgroup | both
//! resident_only = true              # points under the model size are n/a
//! must_match = true                 # ids must equal the reference engine's
//! ```
//!
//! Placeholders (in `command`, `env`, `setup`, `ids_json`): see
//! [`super::template::PLACEHOLDERS`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// How an engine's run is held to its budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BudgetHold {
    /// Only the engine's own flags (no memory cgroup).
    Flag,
    /// Only a memory cgroup of budget + `cgroup_slack` (engines without a budget flag).
    Cgroup,
    /// The engine's flags and a memory cgroup.
    Both,
}

impl BudgetHold {
    /// `flag`, `cgroup` or `both`.
    pub fn as_str(self) -> &'static str {
        match self {
            BudgetHold::Flag => "flag",
            BudgetHold::Cgroup => "cgroup",
            BudgetHold::Both => "both",
        }
    }
    /// Whether the run should be started in a memory cgroup.
    pub fn wants_cgroup(self) -> bool {
        !matches!(self, BudgetHold::Flag)
    }
}

/// One `[engine.NAME]` table: every key optional, overriding the built-in adapter of
/// the same name (or of `adapter`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EngineDef {
    /// Built-in adapter this engine is (`memdial`, `mlx-lm`, `kimi-k3-in-c`,
    /// `llama.cpp`) or `command` (default: the engine's name when it is a built-in,
    /// else `command`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adapter: Option<String>,
    /// The engine's binary (`{bin}`); built-ins also read an environment variable
    /// (`MEMDIAL_K3C_BIN`, `MEMDIAL_LLAMA_BIN`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bin: Option<String>,
    /// The model file or directory given to the engine (`{model}`), when it is not
    /// the sweep's model directory (e.g. a GGUF file). Placeholders allowed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Command template: program and arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// Extra environment of the child (values are templates).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// JSON file the output ids are read from (template).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ids_json: Option<String>,
    /// Dotted key of the ids array in `ids_json` (default `output_ids`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ids_key: Option<String>,
    /// Regex over stdout lines; capture group 1 holds the ids (comma/space separated).
    /// Every matching line contributes (streamed one id per line works too).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ids_stdout_regex: Option<String>,
    /// Regex over stdout lines whose capture group 1 is the seconds of one generation
    /// step, in order: the first is the time to first token (prefill + first token),
    /// the others the decode steps (e.g. kimi-k3-in-c's step table).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps_stdout_regex: Option<String>,
    /// Dotted key (in `ids_json`) of the per-token decode seconds (array).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode_key: Option<String>,
    /// Dotted key of the median (or mean) decode seconds per token, when no array.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode_median_key: Option<String>,
    /// Dotted key of the time to first token, seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_key: Option<String>,
    /// Dotted key of the load time, seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_key: Option<String>,
    /// Dotted key of a version string in `ids_json`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version_key: Option<String>,
    /// Command printing the version on stdout (first line is kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version_command: Option<Vec<String>>,
    /// How the budget is held.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<BudgetHold>,
    /// IO modes the engine supports, each with the arguments `{io_args}` expands to.
    /// Unset: the engine has no IO modes and runs at the spec's first `io` value only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub io: Option<BTreeMap<String, Vec<String>>>,
    /// Prefetch policies the engine supports. Unset: the first `prefetch` value only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefetch: Option<Vec<String>>,
    /// Holds the whole model in memory: points whose budget is under the model size
    /// are `n/a` (skipped, not failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resident_only: Option<bool>,
    /// Resident-only engines: memory the weights take in the engine, as a multiple of
    /// the checkpoint's tensor bytes (default 1; mlx-lm upcasts to float32: ≤ 32/4.25
    /// ≈ 7.5 for MXFP4 experts, 2 for bf16, so 8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resident_factor: Option<f64>,
    /// Resident-only engines: memory of the runtime beside the weights (a size, e.g.
    /// `"512MiB"` for python + mlx). Points whose budget is under
    /// model bytes × `resident_factor` + this are `n/a`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_overhead: Option<String>,
    /// The engine can start warm (its caches filled before the first token; `{start}`
    /// in the command expands to `cold` or `warm`). Unset: `start = "warm"` points
    /// are `n/a` for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warm: Option<bool>,
    /// `model_type`s of config.json the engine runs (unset: any); points of other
    /// models are `n/a`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_types: Option<Vec<String>>,
    /// Setup command run once per model (cached under `{setup_dir}`, which it fills).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub setup: Option<Vec<String>>,
    /// A mismatch against the reference engine fails the sweep (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub must_match: Option<bool>,
    /// Python interpreter for `{python}` (mlx-lm: the oracle venv's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub python: Option<String>,
    /// IO modes in which the engine reads the whole model into its own memory (e.g.
    /// llama.cpp's `buffered` and `direct`): there, points under the model's bytes ×
    /// `resident_factor` + `runtime_overhead` are `n/a`, as for `resident_only`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resident_io: Option<Vec<String>>,
    /// The engine's floor, the least budget it runs this model in: a size
    /// (`"256MiB"`), a fraction of the model (`"40%"`), or per IO mode
    /// (`{ mmap = "64MiB", buffered = "100%" }`). Used by `floor` budgets on models
    /// memdial's engine does not read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub floor: Option<FloorDecl>,
    /// Command printing the engine's floor for `{model}` at `{io}` (first stdout line:
    /// bytes or a size), when no `floor` is declared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub floor_command: Option<Vec<String>>,
    /// Command that shows the engine runs here (exit 0; its first output line is
    /// shown), for `memdial engines check` (default: `version_command`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check: Option<Vec<String>>,
    /// Search the floor by bisection when neither `floor` nor `floor_command` gives it
    /// (see [`crate::sweep::engines::floor`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub floor_search: Option<FloorSearch>,
    /// A Hugging Face `tokenizer.json` (or a directory holding one) that tokenizes the
    /// text prompts on a model memdial's engine does not read, for every engine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokenizer: Option<String>,
    /// What the engine prints: `ids` (default) or `text` (a text-only engine: it is
    /// given `{prompt_text}` and its runs are compared on the SHA-256 of their text).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<OutputKind>,
    /// A text-only engine's output text file (a template, e.g. `{run_dir}/out.txt`);
    /// unset: its whole stdout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text_file: Option<String>,
}

/// What an engine's run yields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OutputKind {
    /// Token ids (compared id by id).
    Ids,
    /// Text only (compared on its SHA-256: a weaker claim than ids).
    Text,
}

/// A declared floor: one for every IO mode, or one per IO mode.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum FloorDecl {
    /// A size or a fraction of the model, for every IO mode.
    All(String),
    /// Per IO mode (modes not listed have no declared floor).
    PerIo(BTreeMap<String, String>),
}

impl FloorDecl {
    /// The floor text for IO mode `io`, if declared.
    pub fn for_io(&self, io: &str) -> Option<&str> {
        match self {
            FloorDecl::All(s) => Some(s),
            FloorDecl::PerIo(m) => m.get(io).map(String::as_str),
        }
    }
}

/// How a floor search runs ([`crate::sweep::engines::floor`]): the smallest cgroup budget at which the
/// engine completes the spec's first prompt, generating the spec's `max_tokens`, with
/// exit 0 within `max_run_s`, bisected to `resolution`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FloorSearch {
    /// The time bound of one run (load, prefill and every token), seconds (default 60).
    #[serde(default = "default_max_run_s")]
    pub max_run_s: f64,
    /// The search stops when the interval between a failing and a completing budget
    /// is at most this: a size or a fraction of the model (default `"2%"`).
    #[serde(default = "default_resolution")]
    pub resolution: String,
    /// The smallest budget tried (default `"16MiB"`).
    #[serde(default = "default_lowest")]
    pub lowest: String,
    /// The largest budget tried, which must complete (default `"2x model"`).
    #[serde(default = "default_highest")]
    pub highest: String,
}

fn default_max_run_s() -> f64 {
    60.0
}
fn default_resolution() -> String {
    "2%".into()
}
fn default_lowest() -> String {
    "16MiB".into()
}
fn default_highest() -> String {
    "2x model".into()
}

impl Default for FloorSearch {
    fn default() -> Self {
        FloorSearch {
            max_run_s: default_max_run_s(),
            resolution: default_resolution(),
            lowest: default_lowest(),
            highest: default_highest(),
        }
    }
}

/// Names of the built-in adapters.
pub const BUILTINS: &[&str] = &[
    "memdial",
    "mlx-lm",
    "kimi-k3-in-c",
    "llama.cpp",
    "llama.cpp-f32",
    "command",
];

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

/// The built-in definition of adapter `name` (`None` for an unknown name). Built-ins
/// are ordinary [`EngineDef`]s; a spec's `[engine.NAME]` overrides any key.
pub fn builtin(name: &str) -> Option<EngineDef> {
    let d = match name {
        "memdial" => EngineDef {
            adapter: Some("memdial".into()),
            budget: Some(BudgetHold::Both),
            must_match: Some(true),
            ..Default::default()
        },
        "mlx-lm" => EngineDef {
            adapter: Some("mlx-lm".into()),
            command: Some(s(&[
                "{python}",
                "{scripts}/mlx_generate.py",
                "{model}",
                "--ids",
                "{prompt_ids}",
                "--max-tokens",
                "{max_tokens}",
                "--eos",
                "{eos_ids}",
                "--out",
                "{run_dir}/engine-out.json",
            ])),
            ids_json: Some("{run_dir}/engine-out.json".into()),
            ids_key: Some("output_ids".into()),
            decode_key: Some("decode_s_per_token".into()),
            ttft_key: Some("ttft_s".into()),
            load_key: Some("load_s".into()),
            version_key: Some("version".into()),
            budget: Some(BudgetHold::Cgroup),
            resident_only: Some(true),
            // Float32 upcast; python + mlx measured at 350 MB peak RSS on tiny-k3.
            resident_factor: Some(8.0),
            runtime_overhead: Some("512MiB".into()),
            // The venv imports the package (a python that exists is not enough).
            check: Some(s(&[
                "{python}",
                "-c",
                "import mlx.core, mlx_lm; print('mlx-lm', mlx_lm.__version__)",
            ])),
            must_match: Some(true),
            env: [("OMP_NUM_THREADS".to_string(), "{threads}".to_string())].into(),
            ..Default::default()
        },
        "kimi-k3-in-c" => EngineDef {
            adapter: Some("kimi-k3-in-c".into()),
            command: Some(s(&[
                "{bin}",
                "{model}",
                "--trunk",
                "{setup_dir}",
                "--trunk-gb",
                "{k3c_trunk_gb}",
                "--cache-gb",
                "{k3c_cache_gb}",
                "--ids",
                "{prompt_ids}",
                "--gen",
                "{max_tokens}",
                "--stop-id",
                "{eos_id}",
                "--threads",
                "{threads}",
                "--incremental",
                "--out",
                "{run_dir}/engine-out.json",
            ])),
            env: [("OMP_NUM_THREADS".to_string(), "{threads}".to_string())].into(),
            ids_json: Some("{run_dir}/engine-out.json".into()),
            ids_key: Some("generated_ids".into()),
            // Its step table: `STEP TOKEN SECONDS …` rows, step 0 = prefill + first token.
            steps_stdout_regex: Some(
                r"^\d+\s+\d+\s+([0-9.]+)\s+[0-9.]+\s+[0-9.]+\s+[0-9.]+\s*$".into(),
            ),
            version_command: Some(s(&["{bin}", "--version"])),
            setup: Some(s(&[
                "python3",
                "{bin_dir}/../tools/pack_trunk.py",
                "{model}",
                "{setup_dir}",
                "{num_layers}",
            ])),
            model_types: Some(vec!["kimi_k3".into()]),
            budget: Some(BudgetHold::Both),
            must_match: Some(true),
            ..Default::default()
        },
        "llama.cpp" | "llama.cpp-f32" => llama_cpp(name == "llama.cpp-f32"),
        "command" => EngineDef {
            adapter: Some("command".into()),
            budget: Some(BudgetHold::Cgroup),
            must_match: Some(true),
            ..Default::default()
        },
        _ => return None,
    };
    Some(d)
}

/// The `llama.cpp` adapters: memdial's `tools/llama-ids` driver (ids in, ids out,
/// greedy argmax over llama.cpp's logits) on a GGUF that the setup step writes with
/// `memdial convert --to gguf` (cached per model). `f32`: every weight F32, so the
/// arithmetic is exact enough to match memdial (`must_match`); native (BF16 trunk,
/// MXFP4 experts): llama.cpp rounds activations (Q8_0 against MXFP4, BF16 against
/// BF16), its ids may differ, reported but not failed. IO modes: `mmap`, `buffered`
/// (read into memory) and `direct` (O_DIRECT reads into memory); the budget is held by
/// a memory cgroup (it has no budget flag). On a model memdial's engine does not read
/// (a GGUF), `llama.cpp` runs that file as it is ([`crate::sweep::engines::registry::Registry::set_opaque`]).
fn llama_cpp(f32: bool) -> EngineDef {
    let dtype = if f32 { "f32" } else { "native" };
    EngineDef {
        adapter: Some(if f32 { "llama.cpp-f32" } else { "llama.cpp" }.into()),
        model: Some("{setup_dir}/model.gguf".into()),
        setup: Some(s(&[
            "{memdial}",
            "convert",
            "--to",
            "gguf",
            "--dtype",
            dtype,
            "--model",
            "{model_dir}",
            "--out",
            "{setup_dir}/model.gguf",
        ])),
        command: Some(s(&[
            "{bin}",
            "-m",
            "{model}",
            "--ids",
            "{prompt_ids}",
            "-n",
            "{max_tokens}",
            "-t",
            "{threads}",
            "--eos",
            "{eos_ids}",
            "{io_args}",
            "--out",
            "{run_dir}/engine-out.json",
        ])),
        ids_json: Some("{run_dir}/engine-out.json".into()),
        ids_key: Some("output_ids".into()),
        decode_key: Some("decode_s_per_token".into()),
        ttft_key: Some("ttft_s".into()),
        load_key: Some("load_s".into()),
        // mmap: the weights stay in the file mapping (`--no-repack`: llama.cpp's CPU
        // backend otherwise copies MXFP4 weights into anonymous memory to repack them,
        // which holds the whole model whatever the budget; measured on mini: OOM-killed
        // at the floor with repacking, 0.96 s/token without). buffered (load mode
        // `none`: read() into its buffers) and direct (load mode `dio`: O_DIRECT reads,
        // no page cache) hold the whole model in memory: resident. `--no-repack` in
        // every mode: repacking swaps the CPU kernels (other roundings: on mini's MXFP4
        // GGUF the ids part at token 2), so with it the IO mode would change the ids.
        io: Some(
            [
                (
                    "mmap".to_string(),
                    s(&["--load-mode", "mmap", "--no-repack"]),
                ),
                (
                    "buffered".to_string(),
                    s(&["--load-mode", "none", "--no-repack"]),
                ),
                (
                    "direct".to_string(),
                    s(&["--load-mode", "dio", "--no-repack"]),
                ),
            ]
            .into(),
        ),
        resident_io: Some(s(&["buffered", "direct"])),
        // Beside the weights in the resident modes: the driver, KV cache and compute
        // buffers of a short context.
        runtime_overhead: Some(LLAMA_RUNTIME_OVERHEAD.into()),
        model_types: Some(vec!["kimi_k3".into(), "kimi_linear".into()]),
        // OpenMP threads spin-wait between ops: on a busy machine that costs 5-10x.
        env: [
            ("OMP_NUM_THREADS".to_string(), "{threads}".to_string()),
            ("OMP_WAIT_POLICY".to_string(), "passive".to_string()),
        ]
        .into(),
        budget: Some(BudgetHold::Cgroup),
        must_match: Some(f32),
        // Initialises llama.cpp's backends and prints its build and CPU features.
        check: Some(s(&["{bin}", "--version"])),
        ..Default::default()
    }
}

/// llama.cpp's memory beside the weights in its resident IO modes (driver, KV cache
/// and compute buffers of a short context), as a size.
pub const LLAMA_RUNTIME_OVERHEAD: &str = "64MiB";

/// Environment variable naming the binary of a built-in adapter.
pub fn bin_env(adapter: &str) -> Option<&'static str> {
    match adapter {
        "kimi-k3-in-c" => Some("MEMDIAL_K3C_BIN"),
        "llama.cpp" | "llama.cpp-f32" => Some("MEMDIAL_LLAMA_BIN"),
        _ => None,
    }
}

/// How to obtain the binary of a built-in adapter (for `memdial engines check` and
/// error messages).
pub fn how_to_build(adapter: &str) -> &'static str {
    match adapter {
        "kimi-k3-in-c" => {
            "tools/build-engines.sh DIR --kimi-k3-in-c SRC (SRC: a kimi-k3-in-c source directory), \
             then export MEMDIAL_K3C_BIN=DIR/kimi-k3-in-c/bin/k3 (see docs/engines.md)"
        }
        "llama.cpp" | "llama.cpp-f32" => {
            "tools/build-engines.sh DIR (llama.cpp from the llama-cpp-python sdist, then memdial's \
             driver tools/llama-ids), then export MEMDIAL_LLAMA_BIN=DIR/bin/llama_ids (see docs/engines.md)"
        }
        "mlx-lm" => {
            "bash fixtures/oracle/setup.sh (creates fixtures/oracle/.venv with mlx-lm), \
             or set MEMDIAL_MLX_PYTHON to a python with mlx-lm 0.32"
        }
        _ => "",
    }
}

/// `a` with every key set in `b` replaced by `b`'s value.
pub fn overlay(a: EngineDef, b: &EngineDef) -> EngineDef {
    macro_rules! pick {
        ($($f:ident),*) => {
            EngineDef { $($f: b.$f.clone().or(a.$f),)* env: {
                let mut e = a.env; e.extend(b.env.clone()); e
            } }
        };
    }
    pick!(
        adapter,
        bin,
        model,
        command,
        ids_json,
        ids_key,
        ids_stdout_regex,
        steps_stdout_regex,
        decode_key,
        decode_median_key,
        ttft_key,
        load_key,
        version_key,
        version_command,
        budget,
        io,
        prefetch,
        resident_only,
        resident_factor,
        runtime_overhead,
        warm,
        model_types,
        setup,
        must_match,
        python,
        resident_io,
        floor,
        floor_command,
        check,
        floor_search,
        tokenizer,
        output,
        text_file
    )
}

/// The engine of a row whose `engine` column is empty (rows of sweeps before the
/// engines axis): memdial.
pub const DEFAULT_ENGINE: &str = "memdial";

/// `name`, or [`DEFAULT_ENGINE`] when empty.
pub fn engine_or_default(name: &str) -> &str {
    if name.is_empty() {
        DEFAULT_ENGINE
    } else {
        name
    }
}

/// Environment variable naming the python of the `mlx-lm` adapter.
pub const MLX_PYTHON_ENV: &str = "MEMDIAL_MLX_PYTHON";
/// Environment variable naming the cache of engine setup steps
/// (default `$XDG_CACHE_HOME/memdial/engines` or `~/.cache/memdial/engines`).
pub const SETUP_CACHE_ENV: &str = "MEMDIAL_ENGINE_CACHE";

/// kimi-k3-in-c's memory outside its trunk ring and expert cache (binary, KV and
/// state buffers, allocator), bytes: ≈144 MB, measured on `mini` by hand (peak RSS
/// with --trunk-gb 0 --cache-gb 0, see docs/engines.md).
pub const K3C_OVERHEAD_BYTES: u64 = 144_000_000;

/// Whether any of the engine's command lines (run, setup, version) holds the
/// placeholder `ph`.
pub fn uses(d: &EngineDef, ph: &str) -> bool {
    d.command.iter().flatten().any(|a| a.contains(ph))
        || d.setup.iter().flatten().any(|a| a.contains(ph))
        || d.version_command.iter().flatten().any(|a| a.contains(ph))
}

/// Whether placeholder `ph` appears in any template of `d` (command, setup, version
/// command, env values, `ids_json`, `model`).
pub fn uses_anywhere(d: &EngineDef, ph: &str) -> bool {
    uses(d, ph)
        || d.env.values().any(|v| v.contains(ph))
        || d.ids_json.as_ref().is_some_and(|t| t.contains(ph))
        || d.model.as_ref().is_some_and(|t| t.contains(ph))
}

/// `name` as a TOML key: bare when it can be (`kimi-k3-in-c`), quoted otherwise
/// (`"llama.cpp"`).
pub fn toml_key(name: &str) -> String {
    if name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        name.to_string()
    } else {
        format!("{name:?}")
    }
}
