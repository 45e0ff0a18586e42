//! The bad-input corpus: one table of inputs → exit code + message fragment,
//! never a panic, never a silent exit 0 — plus a sweep on a NaN-producing checkpoint,
//! which must be FAIL (exit 1), not PASS on identical garbage.
//!
//! Each case copies the `tiny-k3` fixture into a scratch directory of its own and
//! corrupts it in one place (the expected fragment follows from that place: the tensor,
//! block or layer poked, the position of the last prompt token).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use memdial::format::checkpoint::Checkpoint;
use memdial_testkit as testkit;
use memdial_testkit::memdial_bin;
use memdial_testkit::shared_fixture;
use testkit::output_text as text;

/// The prompt of every run: 3 tokens, so the last prompt position is 2.
const PROMPT: &str = "1,2,3";

fn memdial(args: &[&str]) -> Output {
    Command::new(memdial_bin!()).args(args).output().unwrap()
}

/// A copy of the clean fixture in `SCRATCH/model`.
fn copy(tag: &str) -> (testkit::Scratch, PathBuf) {
    let s = testkit::scratch!(tag);
    let d = s.join("model");
    std::fs::create_dir_all(&d).unwrap();
    for e in std::fs::read_dir(shared_fixture!("tiny-k3")).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), d.join(e.file_name())).unwrap();
    }
    (s, d)
}

/// Overwrites bytes `at..` of tensor `name` (full checkpoint name) with `bytes`.
fn poke(dir: &Path, name: &str, at: u64, bytes: &[u8]) {
    use std::os::unix::fs::FileExt;
    let ck = Checkpoint::open(dir).unwrap();
    let loc = ck.get(name).unwrap_or_else(|| panic!("no tensor {name}"));
    assert!(at + bytes.len() as u64 <= loc.len);
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&ck.shards[loc.shard].path)
        .unwrap();
    f.write_all_at(bytes, loc.offset + at).unwrap();
}

/// The first routed expert the router picks at position 0 in the first MoE layer, for
/// PROMPT on the clean fixture (read from a `--record-trace` of a clean run), as
/// `(layer, expert)`: an expert the run certainly uses.
fn used_expert() -> (usize, usize) {
    static E: OnceLock<(usize, usize)> = OnceLock::new();
    *E.get_or_init(|| {
        let s = testkit::scratch!("bad-input-trace");
        let tr = s.join("trace.jsonl");
        let o = memdial(&[
            "run",
            "--model",
            shared_fixture!("tiny-k3").to_str().unwrap(),
            "--prompt-ids",
            PROMPT,
            "--max-tokens",
            "1",
            "--budget",
            "1GiB",
            "--io",
            "buffered",
            "--record-trace",
            tr.to_str().unwrap(),
        ]);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        let t = std::fs::read_to_string(&tr).unwrap();
        // The first routing line (format 2 opens with a header and has forward lines).
        let first: serde_json::Value = t
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .find(|v| v.get("layer").is_some())
            .unwrap();
        (
            first["layer"].as_u64().unwrap() as usize,
            first["experts"][0].as_u64().unwrap() as usize,
        )
    })
}

/// The w2 scale tensor of the used expert, and the same with the weight prefix.
fn used_scale() -> (String, String) {
    let (l, e) = used_expert();
    let short = format!("model.layers.{l}.block_sparse_moe.experts.{e}.w2.weight_scale");
    (short.clone(), format!("language_model.{short}"))
}

/// A model corrupted one way.
#[derive(Clone, Copy, Debug)]
enum Model {
    /// E8M0 scale byte 5 of the used expert's w2 set to 0xFF (NaN).
    E8m0Nan,
    /// BF16 element 5 of layer 2's `self_attn.o_proj.weight` set to NaN (0x7FC0).
    Bf16Nan,
    /// BF16 element 0 of the final `model.norm.weight` set to +Inf (0x7F80).
    Bf16Inf,
    /// `rms_norm_eps: -1` in config.json.
    NegativeEps,
    /// One byte of the final `model.norm.weight` (a pinned tensor, read at open) changed;
    /// `tensors.sha256` still has the clean checksums.
    PinnedFlip,
    /// One byte of `lm_head.weight` changed (read in row blocks at a budget near the
    /// floor); `tensors.sha256` still has the clean checksums.
    LmHeadFlip,
    /// `tensors.sha256` present but empty.
    EmptyManifest,
    /// `tensors.sha256` without the entries of the used expert's w2 scale.
    PartialManifest,
    /// The clean fixture (the case's flags are what is wrong), with two expert traces
    /// in the model directory: `bad-expert.jsonl` names expert 1000000 in layer 1
    /// (tiny-k3 has 16 experts), `bad-layer.jsonl` names layer 0 (a dense layer:
    /// `first_k_dense_replace` 1).
    Clean,
    /// `num_experts: 1000000` in config.json (the checkpoint holds experts 0..16).
    HugeNumExperts,
    /// `rms_norm_eps: 0` in config.json.
    ZeroEps,
    /// A `kda_layers` entry 9 beyond `num_hidden_layers` 8.
    KdaLayerBeyond,
    /// `eos_token_id: 2^40` in config.json (text_config and top level).
    HugeEos,
    /// `model.safetensors.index.json` maps `model.norm.weight` to the other shard.
    IndexDisagrees,
    /// An overlay shard `overlay.safetensors` holds the clean `model.norm.weight`, and the
    /// index maps it there; the stale copy left in its base shard is +Inf (used, every
    /// logit would be non-finite).
    OverlayShard,
    /// `generation_config.json` with `eos_token_id` 2^40.
    HugeGenerationEos,
}

/// Sets `text_config[key] = value` (and the top-level key when `top` is true).
fn edit_config(d: &Path, top: bool, f: impl Fn(&mut serde_json::Value)) {
    let p = d.join("config.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    if top {
        f(&mut v);
    }
    if v.get("text_config").is_some() {
        f(&mut v["text_config"]);
    } else if !top {
        f(&mut v);
    }
    std::fs::write(&p, serde_json::to_string_pretty(&v).unwrap()).unwrap();
}

fn make(m: Model) -> (testkit::Scratch, PathBuf) {
    let (s, d) = copy(&format!("bad-input-{m:?}"));
    match m {
        Model::E8m0Nan => poke(&d, &used_scale().1, 5, &[0xFF]),
        Model::Bf16Nan => poke(
            &d,
            "language_model.model.layers.2.self_attn.o_proj.weight",
            10,
            &0x7FC0u16.to_le_bytes(),
        ),
        Model::Bf16Inf => poke(
            &d,
            "language_model.model.norm.weight",
            0,
            &0x7F80u16.to_le_bytes(),
        ),
        Model::NegativeEps => {
            let p = d.join("config.json");
            let mut v: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
            let tc = if v.get("text_config").is_some() {
                &mut v["text_config"]
            } else {
                &mut v
            };
            tc["rms_norm_eps"] = serde_json::json!(-1);
            std::fs::write(&p, serde_json::to_string_pretty(&v).unwrap()).unwrap();
        }
        Model::Clean => {
            std::fs::write(
                d.join("bad-expert.jsonl"),
                "{\"token\":0,\"layer\":1,\"experts\":[1000000]}\n",
            )
            .unwrap();
            std::fs::write(
                d.join("bad-layer.jsonl"),
                "{\"token\":0,\"layer\":0,\"experts\":[1]}\n",
            )
            .unwrap();
        }
        Model::HugeNumExperts => edit_config(&d, false, |c| {
            c["num_experts"] = serde_json::json!(1_000_000)
        }),
        Model::ZeroEps => edit_config(&d, false, |c| c["rms_norm_eps"] = serde_json::json!(0)),
        Model::KdaLayerBeyond => edit_config(&d, false, |c| {
            c["linear_attn_config"]["kda_layers"]
                .as_array_mut()
                .unwrap()
                .push(serde_json::json!(9))
        }),
        Model::HugeEos => edit_config(&d, true, |c| {
            c["eos_token_id"] = serde_json::json!(1u64 << 40)
        }),
        Model::IndexDisagrees => {
            let p = d.join("model.safetensors.index.json");
            let mut v: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
            let wm = &mut v["weight_map"]["language_model.model.norm.weight"];
            let was = wm.as_str().unwrap().to_string();
            let other = Checkpoint::open(&d)
                .unwrap()
                .shards
                .iter()
                .map(|s| s.path.file_name().unwrap().to_string_lossy().into_owned())
                .find(|f| *f != was)
                .unwrap();
            *wm = serde_json::json!(other);
            std::fs::write(&p, serde_json::to_string(&v).unwrap()).unwrap();
        }
        Model::OverlayShard => {
            let name = "language_model.model.norm.weight";
            let ck = Checkpoint::open(&d).unwrap();
            let loc = ck.get(name).unwrap().clone();
            let mut bytes = vec![0u8; loc.len as usize];
            {
                use std::os::unix::fs::FileExt;
                let f = std::fs::File::open(&ck.shards[loc.shard].path).unwrap();
                f.read_exact_at(&mut bytes, loc.offset).unwrap();
            }
            assert_eq!(loc.dtype, "BF16");
            let view =
                safetensors::tensor::TensorView::new(safetensors::Dtype::BF16, loc.shape, &bytes)
                    .unwrap();
            safetensors::serialize_to_file([(name, view)], None, &d.join("overlay.safetensors"))
                .unwrap();
            poke(&d, name, 0, &0x7F80u16.to_le_bytes());
            let p = d.join("model.safetensors.index.json");
            let mut v: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
            v["weight_map"][name] = serde_json::json!("overlay.safetensors");
            std::fs::write(&p, serde_json::to_string(&v).unwrap()).unwrap();
        }
        Model::HugeGenerationEos => std::fs::write(
            d.join("generation_config.json"),
            format!("{{\"eos_token_id\": [2, {}]}}", 1u64 << 40),
        )
        .unwrap(),
        Model::PinnedFlip => poke(&d, "language_model.model.norm.weight", 1, &[0x00]),
        Model::LmHeadFlip => poke(&d, "language_model.lm_head.weight", 100, &[0x5a]),
        Model::EmptyManifest => std::fs::write(d.join("tensors.sha256"), "").unwrap(),
        Model::PartialManifest => {
            let p = d.join("tensors.sha256");
            let drop = used_scale().1;
            let kept: String = std::fs::read_to_string(&p)
                .unwrap()
                .lines()
                .filter(|l| !l.ends_with(&format!("  {drop}")))
                .map(|l| format!("{l}\n"))
                .collect();
            std::fs::write(&p, kept).unwrap();
        }
    }
    (s, d)
}

/// One row of the corpus.
struct Case {
    model: Model,
    /// `memdial` arguments; `{M}` is replaced by the model directory.
    args: &'static [&'static str],
    code: i32,
    /// Fragments the stderr (or, for `inspect`, stdout) must contain; `{SCALE}` is the
    /// used expert's w2 scale tensor without the weight prefix, `{FULL_SCALE}` with it.
    expect: &'static [&'static str],
}

const RUN: &[&str] = &[
    "run",
    "--model",
    "{M}",
    "--prompt-ids",
    PROMPT,
    "--max-tokens",
    "2",
];

fn cases() -> Vec<Case> {
    let streamed = |io: &'static str| -> &'static [&'static str] {
        match io {
            "direct" => &["--budget", "1GiB", "--io", "direct"],
            "buffered" => &["--budget", "1GiB", "--io", "buffered"],
            _ => &["--budget", "1GiB", "--io", "mmap"],
        }
    };
    let mut v = vec![
        // E8M0 NaN scale: refused by the resident store and by every IO mode of the
        // streaming store when the expert is read, naming tensor and block.
        Case {
            model: Model::E8m0Nan,
            args: &[],
            code: 1,
            expect: &["{SCALE}", "block 5 is 0xFF"],
        },
        // ... and by inspect's full scan (block 5 = weights 160..192).
        Case {
            model: Model::E8m0Nan,
            args: &["inspect", "--model", "{M}"],
            code: 1,
            expect: &[
                "{FULL_SCALE}: E8M0 scale of block 5 is 0xFF",
                "weights 160..192",
            ],
        },
        // NaN / Inf in a BF16 weight: the logits of the last prompt position (2) are
        // checked; --check-hidden names the first layer that went non-finite.
        Case {
            model: Model::Bf16Nan,
            args: &[],
            code: 1,
            expect: &["non-finite logits at position 2"],
        },
        Case {
            model: Model::Bf16Nan,
            args: &["--check-hidden"],
            code: 1,
            expect: &["layer 2 produced a non-finite hidden state"],
        },
        Case {
            model: Model::Bf16Inf,
            args: &[],
            code: 1,
            expect: &["non-finite logits at position 2"],
        },
        // rms_norm_eps ≤ 0 is refused at load (before: every logit NaN at run time).
        Case {
            model: Model::NegativeEps,
            args: &[],
            code: 1,
            expect: &["rms_norm_eps must be a finite number > 0, got -1"],
        },
        Case {
            model: Model::ZeroEps,
            args: &[],
            code: 1,
            expect: &["rms_norm_eps must be a finite number > 0, got 0"],
        },
        // --verify-reads with a manifest that would not verify everything: refused (2).
        Case {
            model: Model::EmptyManifest,
            args: &["--budget", "1GiB", "--io", "buffered", "--verify-reads"],
            code: 2,
            expect: &["tensors.sha256 is empty", "memdial checksum --model"],
        },
        // ... and verifies the pinned tensors it reads at open, too.
        Case {
            model: Model::PinnedFlip,
            args: &["--budget", "1GiB", "--io", "buffered", "--verify-reads"],
            code: 1,
            expect: &["verifying reads: tensor language_model.model.norm.weight read from"],
        },
        // ... and a tensor read in row blocks (lm_head near the floor) is hashed whole.
        // (The direct-IO floor of tiny-k3 at 4096 positions is 9.27 MiB.)
        Case {
            model: Model::LmHeadFlip,
            args: &[
                "--budget",
                "9.5MiB",
                "--max-context",
                "4096",
                "--io",
                "direct",
                "--verify-reads",
            ],
            code: 1,
            expect: &["verifying reads: tensor language_model.lm_head.weight read from"],
        },
        Case {
            model: Model::LmHeadFlip,
            args: &[
                "--budget",
                "9MiB",
                "--max-context",
                "4096",
                "--io",
                "mmap",
                "--verify-reads",
            ],
            code: 1,
            expect: &["verifying reads: tensor language_model.lm_head.weight read from"],
        },
        Case {
            model: Model::PartialManifest,
            args: &["--budget", "1GiB", "--io", "buffered", "--verify-reads"],
            code: 2,
            expect: &[
                "has no entry for tensor {FULL_SCALE}",
                "memdial checksum --model",
            ],
        },
    ];
    v.extend(limits_cases());
    for io in ["direct", "buffered", "mmap"] {
        v.push(Case {
            model: Model::E8m0Nan,
            args: streamed(io),
            code: 1,
            expect: &["{SCALE}", "block 5 is 0xFF"],
        });
    }
    v
}

/// Limits checked before work: dimensions against the checkpoint,
/// config ranges, index.json against the headers, thread counts, sizes and counts
/// that overflow, non-finite sampling parameters, trace ids.
fn limits_cases() -> Vec<Case> {
    // tiny-k3: 8 layers, layer 0 dense and 1..8 MoE (7 MoE layers), 16 experts,
    // 884 tensors; 7 × 1000000 × 3 = 21000000 expert tensors implied.
    let experts_msg: &'static [&'static str] = &[
        "num_experts 1000000 × 7 MoE layers implies at least 21000000 routed-expert tensors",
        "holds 884 tensors in all (its largest expert id is 15)",
    ];
    let mut v = vec![];
    for args in [
        &[][..],
        &["inspect", "--model", "{M}"][..],
        &["plan", "--model", "{M}", "--budget", "1GiB"][..],
    ] {
        v.push(Case {
            model: Model::HugeNumExperts,
            args,
            code: 1,
            expect: experts_msg,
        });
    }
    v.extend([
        Case {
            model: Model::KdaLayerBeyond,
            args: &[],
            code: 1,
            expect: &["linear_attn_config.kda_layers entry 9 is outside 1..=8"],
        },
        Case {
            model: Model::HugeEos,
            args: &[],
            code: 1,
            expect: &["eos_token_id 1099511627776 is out of range"],
        },
        Case {
            model: Model::IndexDisagrees,
            args: &[],
            code: 1,
            expect: &[
                "model.safetensors.index.json disagrees with the shard headers",
                "it maps language_model.model.norm.weight to",
            ],
        },
        Case {
            model: Model::Clean,
            args: &["--threads", "100000"],
            code: 2,
            expect: &["--threads", "1..=1024"],
        },
        // A warm start fills the streaming store's caches: nothing to fill without one.
        Case {
            model: Model::Clean,
            args: &["--start", "warm"],
            code: 2,
            expect: &["--start warm needs --budget"],
        },
        Case {
            model: Model::Clean,
            args: &["--budget", "1GiB", "--start", "hot"],
            code: 2,
            expect: &["--start", "hot"],
        },
        Case {
            model: Model::Clean,
            args: &["--budget", "1GiB", "--io-threads", "100000"],
            code: 2,
            expect: &["--io-threads", "1..=1024"],
        },
        Case {
            model: Model::Clean,
            args: &["--budget", "99999999999TB"],
            code: 2,
            expect: &["99999999999TB", "too large"],
        },
        Case {
            model: Model::Clean,
            args: &[
                "run",
                "--model",
                "{M}",
                "--prompt-ids",
                PROMPT,
                "--max-tokens",
                "18446744073709551615",
            ],
            code: 2,
            expect: &["--max-tokens 18446744073709551615 plus the prompt's 3 tokens overflows"],
        },
        Case {
            model: Model::Clean,
            args: &["--budget", "1GiB", "--max-context", "18446744073709551615"],
            code: 2,
            expect: &["needs more than 2^64 bytes of MLA cache"],
        },
        // Without a budget: the state and arena for 10^12 positions (over 600 TiB) are
        // refused against the machine's available memory before anything is allocated.
        Case {
            model: Model::Clean,
            args: &["--max-context", "1000000000000"],
            code: 2,
            expect: &[
                "--max-context 1000000000000: a context of 1000000000000 positions needs",
                "this machine has available (MemAvailable)",
            ],
        },
        // The index decides which shard holds a tensor: the overlay's copy is used (the
        // stale +Inf one would make every logit non-finite), and inspect says so.
        Case {
            model: Model::OverlayShard,
            args: &[],
            code: 0,
            expect: &[],
        },
        Case {
            model: Model::OverlayShard,
            args: &["inspect", "--model", "{M}"],
            code: 0,
            expect: &[
                "language_model.model.norm.weight: stale copy in model-",
                "ignored (model.safetensors.index.json maps it to overlay.safetensors)",
            ],
        },
        Case {
            model: Model::HugeGenerationEos,
            args: &[],
            code: 1,
            expect: &[
                "generation_config.json",
                "eos_token_id 1099511627776 is out of range",
            ],
        },
        // Prompt files: the wrong kind of path is a usage error naming the flag.
        Case {
            model: Model::Clean,
            args: &[
                "run",
                "--model",
                "{M}",
                "--prompt-file",
                "{M}",
                "--max-tokens",
                "2",
            ],
            code: 2,
            expect: &["--prompt-file", "is a directory, not a text file"],
        },
        Case {
            model: Model::Clean,
            args: &[
                "run",
                "--model",
                "{M}",
                "--prompt-file",
                "{M}/no-such-prompt.txt",
                "--max-tokens",
                "2",
            ],
            code: 2,
            expect: &["--prompt-file", "no-such-prompt.txt: no such file"],
        },
        Case {
            model: Model::Clean,
            args: &[
                "run",
                "--model",
                "{M}",
                "--prompt-file",
                "{M}/model-00001-of-00002.safetensors",
                "--max-tokens",
                "2",
            ],
            code: 2,
            expect: &["--prompt-file", "not UTF-8 text (invalid byte at offset"],
        },
        Case {
            model: Model::Clean,
            args: &["tokenize", "--model", "{M}", "--file", "/dev/zero"],
            code: 2,
            expect: &["--file /dev/zero: more than 268435456 bytes (256 MiB), not a prompt"],
        },
        Case {
            model: Model::Clean,
            args: &["tokenize", "--model", "{M}", "--file", "{M}"],
            code: 2,
            expect: &["--file", "is a directory, not a text file"],
        },
        Case {
            model: Model::Clean,
            args: &["--temperature", "NaN"],
            code: 2,
            expect: &["--temperature", "finite"],
        },
        Case {
            model: Model::Clean,
            args: &["--temperature", "inf"],
            code: 2,
            expect: &["--temperature", "finite"],
        },
        Case {
            model: Model::Clean,
            args: &["--top-p", "NaN"],
            code: 2,
            expect: &["--top-p", "finite"],
        },
        Case {
            model: Model::Clean,
            args: &["run", "--model", "{M}", "--prompt-ids", "99999999999"],
            code: 2,
            expect: &["99999999999 is not in 0..=4294967295"],
        },
        Case {
            model: Model::Clean,
            args: &[
                "--budget",
                "1GiB",
                "--io",
                "buffered",
                "--prefetch",
                "oracle",
                "--trace",
                "{M}/bad-expert.jsonl",
            ],
            code: 2,
            expect: &[
                "bad-expert.jsonl record 1: expert id 1000000 is out of range (num_experts 16)",
            ],
        },
        Case {
            model: Model::Clean,
            args: &[
                "--budget",
                "1GiB",
                "--io",
                "buffered",
                "--prefetch",
                "oracle",
                "--trace",
                "{M}/bad-layer.jsonl",
            ],
            code: 2,
            expect: &["bad-layer.jsonl record 1: layer 0 is not a MoE layer"],
        },
    ]);
    v
}

/// A thread the OS refuses to spawn (thread 480 of 1024, refused with EAGAIN through
/// the test-only hook `MEMDIAL_TEST_SPAWN_FAIL_AT` of `kernels::par::spawn_thread`) is
/// an error naming the thread, exit 1 — not a panic or an abort.
fn thread_spawn_failure_is_an_error() {
    let (_s, dir) = make(Model::Clean);
    for (flags, what) in [
        ("--threads 1024", "cannot start kernel thread"),
        (
            "--budget 1GiB --io buffered --io-threads 1024",
            "cannot start IO thread",
        ),
    ] {
        // The test-only hook fails the spawn of thread index 480 as the OS would
        // (EAGAIN); an address-space limit (`ulimit -v`) was flaky: the failing
        // allocation may come inside a thread already started, where std aborts.
        let o = Command::new(memdial_bin!())
            .args(["run", "--model"])
            .arg(&dir)
            .args(["--prompt-ids", PROMPT, "--max-tokens", "1"])
            .args(flags.split(' '))
            .env("MEMDIAL_TEST_SPAWN_FAIL_AT", "480")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{flags}: {}", text(&o));
        assert!(
            err.contains(what) && !err.contains("panicked"),
            "{flags}: {}",
            text(&o)
        );
    }
}

/// A shard truncated during an `--io mmap` run (made deterministic by the test-only
/// hook `MEMDIAL_TEST_MMAP_TRUNCATE`, which truncates the file of the first range the
/// store faults in to that range's start, after the size check): exit 1 with a
/// message naming the file — via `MADV_POPULATE_READ`'s EFAULT (`populate`), or via
/// the SIGBUS handler when the page is touched directly (`touch`) — never a bare
/// SIGBUS (exit 135 / signal 7).
fn mmap_truncated_during_run_is_an_error() {
    for (hook, what) in [
        (
            "populate",
            "of the memory-mapped file cannot be read (EFAULT)",
        ),
        ("touch", "bus error reading the memory-mapped file"),
    ] {
        let (_s, dir) = make(Model::Clean);
        let o = Command::new(memdial_bin!())
            .env(memdial::io::mmap_guard::TEST_TRUNCATE_ENV, hook)
            .args(["run", "--model"])
            .arg(&dir)
            .args([
                "--prompt-ids",
                PROMPT,
                "--max-tokens",
                "2",
                "--budget",
                "1GiB",
            ])
            .args(["--io", "mmap"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{hook}: {}", text(&o));
        assert!(
            err.contains(what)
                && err.contains(dir.to_str().unwrap())
                && err.contains(".safetensors"),
            "{hook}: {}",
            text(&o)
        );
    }
}

fn bad_inputs_give_the_right_exit_code_and_message() {
    let (scale, full_scale) = used_scale();
    let mut failures = Vec::new();
    let mut n = 0;
    for c in cases() {
        let (_s, dir) = make(c.model);
        let m = dir.to_str().unwrap();
        // Extra arguments are appended to `memdial run …`, unless they name a command.
        let args: Vec<String> = if c.args.first().is_some_and(|a| !a.starts_with("--")) {
            c.args.iter().map(|a| a.replace("{M}", m)).collect()
        } else {
            RUN.iter()
                .chain(c.args)
                .map(|a| a.replace("{M}", m))
                .collect()
        };
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = memdial(&argv);
        let out = format!(
            "{}{}",
            String::from_utf8_lossy(&o.stderr),
            String::from_utf8_lossy(&o.stdout)
        );
        let mut bad = Vec::new();
        if o.status.code() != Some(c.code) {
            bad.push(format!("exit {:?}, want {}", o.status.code(), c.code));
        }
        if out.contains("panicked") {
            bad.push("panicked".into());
        }
        for f in c.expect {
            let f = f
                .replace("{FULL_SCALE}", &full_scale)
                .replace("{SCALE}", &scale);
            if !out.contains(&f) {
                bad.push(format!("no {f:?}"));
            }
        }
        if !bad.is_empty() {
            failures.push(format!(
                "{:?} memdial {}: {}\n{}",
                c.model,
                argv.join(" "),
                bad.join("; "),
                text(&o)
            ));
        }
        n += 1;
    }
    assert!(
        failures.is_empty(),
        "{} of {n} cases failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    println!("{n} bad inputs: right exit code and message, no panic");
}

/// A sweep over budgets × IO modes on a checkpoint with one E8M0 NaN scale in a used
/// expert: every run fails, so the verdict is FAIL and the exit code 1.
fn sweep_on_nan_checkpoint_is_fail() {
    let (s, dir) = make(Model::E8m0Nan);
    let spec = s.join("spec.toml");
    std::fs::write(
        &spec,
        r#"
name = "nan"
budgets = ["floor", "3x floor"]
io = ["direct", "buffered", "mmap"]
prefetch = ["none"]
cache = ["lru"]
threads = [1]
prompts = [{ ids = [1, 2, 3] }]
max_tokens = 2
repeats = 1
"#,
    )
    .unwrap();
    let out = s.join("sweep");
    let o = Command::new(memdial_bin!())
        .args(["sweep", "--check", "--bandwidth-probe", "4MiB", "--model"])
        .arg(&dir)
        .arg("--spec")
        .arg(&spec)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        stdout.contains("FAIL") && !stdout.contains("PASS"),
        "{}",
        text(&o)
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("verdict.json")).unwrap()).unwrap();
    assert_eq!(v["pass"], serde_json::json!(false), "{v}");
    // Every run's own stderr names the bad scale.
    let (scale, _) = used_scale();
    let mut runs = 0;
    for e in std::fs::read_dir(out.join("runs")).unwrap() {
        let e = e.unwrap().path();
        let err = std::fs::read_to_string(e.join("stderr.txt")).unwrap();
        assert!(err.contains(&scale), "{}: {err}", e.display());
        runs += 1;
    }
    assert_eq!(runs, 6, "2 budgets × 3 IO modes, 1 repeat");
}

fn main() -> std::process::ExitCode {
    testkit::main(
        include_str!("bad_input.rs"),
        testkit::trials![
            bad_inputs_give_the_right_exit_code_and_message,
            sweep_on_nan_checkpoint_is_fail,
            thread_spawn_failure_is_an_error,
            mmap_truncated_during_run_is_an_error
        ],
    )
}
