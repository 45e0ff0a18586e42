//! Parity of the gpt-oss (`o200k_harmony`) tokenizer and chat template with Python on the
//! committed cases in `fixtures/tokenizer/harmony/cases.json` (regenerate with
//! `fixtures/tokenizer/harmony/regen.sh`; see its README):
//! - a ranks file with the specials at their published ids (199998..201088) against Python
//!   tiktoken's own `o200k_harmony()` given the same ranks file by path;
//! - `tokenizer.json` (specials right after the ranks) against tiktoken on the same ranks and
//!   Hugging Face tokenizers on the same file (equal there, asserted at generation);
//! - the harmony `chat_template.jinja` rendered with `strftime_now` pinned to 2025-08-05
//!   against transformers' `apply_chat_template`, text and ids.
//!
//! The vocabulary is the first 32 768 ranks of o200k_base.

use std::path::{Path, PathBuf};

use memdial::format::chat::{render_at, Message, TemplateClock};
use memdial::format::tokenizer::{Tokenizer, HARMONY_RANKS_FILE, O200K_PAT_STR};
use memdial::tools::fixture::harmony_vocab::{
    write_harmony_tokenizer_files, SpecialLayout, CHAT_TEMPLATE_FILE,
};
use serde_json::Value;
use sha2::{Digest, Sha256};

fn doc() -> Value {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(root.join("fixtures/tokenizer/harmony/cases.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap_or_else(|| panic!("not a list: {v}"))
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

fn short(s: &str) -> String {
    let t: String = s.chars().take(60).collect();
    format!("{t:?}{}", if s.chars().count() > 60 { "…" } else { "" })
}

/// Writes the published-layout and after-ranks directories and checks their files are
/// those the expected ids were computed from.
fn write_dirs(doc: &Value, tag: &str) -> (memdial_testkit::Scratch, PathBuf, PathBuf) {
    let scratch = memdial_testkit::scratch!(tag);
    let n_base = doc["n_base"].as_u64().unwrap() as u32;
    let n_after = doc["n_after"].as_u64().unwrap() as u32;
    let (a, b) = (scratch.path().join("a"), scratch.path().join("b"));
    write_harmony_tokenizer_files(&a, n_base, SpecialLayout::Published).unwrap();
    write_harmony_tokenizer_files(&b, n_base, SpecialLayout::AfterRanks(n_after)).unwrap();
    for (dir, key) in [(&a, "sha256_published"), (&b, "sha256_after")] {
        for (name, want) in doc[key].as_object().unwrap() {
            let got: String = Sha256::digest(std::fs::read(dir.join(name)).unwrap())
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            assert_eq!(
                &got, want,
                "{key} {name}: the files differ from the fixture's"
            );
        }
    }
    (scratch, a, b)
}

fn check_cases(tok: &Tokenizer, cases: &[Value], key: &str, failures: &mut Vec<String>) {
    for c in cases {
        let s = c["text"].as_str().unwrap();
        let want = ids(&c[key]);
        let got = tok.encode(s, true);
        if got != want {
            failures.push(format!("{key} {}: got {got:?} want {want:?}", short(s)));
        }
        // 200018 has two names in tiktoken's table; it decodes to <|endofprompt|>.
        if !s.contains("<|reserved_200018|>") {
            match tok.decode(&want) {
                Ok(d) if d == s => {}
                other => failures.push(format!("{key} decode {}: {other:?}", short(s))),
            }
        }
    }
}

#[test]
fn parity_with_python_tiktoken_and_hf_tokenizers() {
    let doc = doc();
    assert_eq!(
        doc["pat_str"].as_str().unwrap(),
        O200K_PAT_STR,
        "pattern drift"
    );
    let (_scratch, a, b) = write_dirs(&doc, "tok-harmony");
    let cases = doc["cases"].as_array().unwrap();
    assert!(cases.len() >= 500, "{} cases", cases.len());

    // A: the ranks file alone (no added_tokens_decoder): tiktoken's o200k_harmony table.
    let tok_a = Tokenizer::from_dir(&a).unwrap();
    for (name, id) in doc["special_tokens"].as_object().unwrap() {
        assert_eq!(
            tok_a.special_id(name),
            id.as_u64().map(|i| i as u32),
            "{name}"
        );
    }
    assert_eq!(tok_a.n_vocab(), 201_088);
    let mut failures = Vec::new();
    check_cases(&tok_a, cases, "ids", &mut failures);
    for c in cases {
        let s = c["text"].as_str().unwrap();
        if tok_a.encode(s, false) != ids(&c["ids_no_special"]) {
            failures.push(format!("ids_no_special {}", short(s)));
        }
    }
    // B: tokenizer.json (what from_dir picks), and its ranks file with its config.
    let tok_b = Tokenizer::from_dir(&b).unwrap();
    check_cases(&tok_b, cases, "ids_after", &mut failures);
    let cfg: Value =
        serde_json::from_str(&std::fs::read_to_string(b.join("tokenizer_config.json")).unwrap())
            .unwrap();
    let tok_b_ranks = Tokenizer::from_ranks_file(&b.join(HARMONY_RANKS_FILE), Some(&cfg)).unwrap();
    check_cases(&tok_b_ranks, cases, "ids_after", &mut failures);
    assert!(
        failures.is_empty(),
        "{} of {} checks failed:\n{}",
        failures.len(),
        cases.len() * 5,
        failures[..failures.len().min(20)].join("\n")
    );
}

fn messages(v: &Value) -> Vec<Message> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|m| Message {
            role: m["role"].as_str().unwrap().into(),
            content: m["content"].as_str().unwrap().into(),
        })
        .collect()
}

#[test]
fn harmony_chat_template_matches_transformers() {
    let doc = doc();
    let (_scratch, a, b) = write_dirs(&doc, "tok-harmony-chat");
    let clock = TemplateClock::Fixed(doc["source_date_epoch"].as_i64().unwrap());
    let tok_a = Tokenizer::from_dir(&a).unwrap();
    let tok_b = Tokenizer::from_dir(&b).unwrap();
    let template = std::fs::read_to_string(b.join(CHAT_TEMPLATE_FILE)).unwrap();
    let chats = doc["chat"].as_array().unwrap();
    assert!(chats.len() >= 8);
    for c in chats {
        let msgs = messages(&c["messages"]);
        let agp = c["add_generation_prompt"].as_bool().unwrap();
        let rendered = render_at(&template, &msgs, agp, &tok_b, clock).unwrap();
        assert_eq!(rendered, c["rendered"].as_str().unwrap(), "{msgs:?}");
        assert_eq!(tok_b.encode(&rendered, true), ids(&c["ids"]), "{msgs:?}");
        assert_eq!(
            tok_a.encode(&rendered, true),
            ids(&c["ids_published"]),
            "{msgs:?}"
        );
    }
}

/// Files the reader must refuse, each with a message naming what is wrong.
#[test]
fn bad_tokenizer_files_are_refused_by_name() {
    let scratch = memdial_testkit::scratch!("tok-harmony-bad");
    let d = scratch.path();
    let err = |d: &Path| format!("{:#}", Tokenizer::from_dir(d).unwrap_err());
    let e = err(d);
    assert!(
        e.contains("no tokenizer files") && e.contains("tokenizer.json") && e.contains(".tiktoken"),
        "{e}"
    );
    write_harmony_tokenizer_files(d, 512, SpecialLayout::AfterRanks(21)).unwrap();
    let json_path = d.join("tokenizer.json");
    let good = std::fs::read_to_string(&json_path).unwrap();
    let mut v: Value = serde_json::from_str(&good).unwrap();
    // An added token id past a gap: Hugging Face would renumber it.
    v["added_tokens"][20]["id"] = 700.into();
    std::fs::write(&json_path, v.to_string()).unwrap();
    assert!(err(d).contains("would be 532"), "{}", err(d));
    // Merges out of rank order.
    let mut v: Value = serde_json::from_str(&good).unwrap();
    v["model"]["merges"].as_array_mut().unwrap().reverse();
    std::fs::write(&json_path, v.to_string()).unwrap();
    assert!(err(d).contains("not in rank order"), "{}", err(d));
    // A missing merge.
    let mut v: Value = serde_json::from_str(&good).unwrap();
    v["model"]["merges"].as_array_mut().unwrap().remove(0);
    std::fs::write(&json_path, v.to_string()).unwrap();
    assert!(err(d).contains("merge is missing"), "{}", err(d));
    // GPT-2's own pre-tokenizer (ByteLevel with its regex) is another tokenizer.
    let mut v: Value = serde_json::from_str(&good).unwrap();
    v["pre_tokenizer"] = serde_json::json!({"type": "ByteLevel", "use_regex": true});
    std::fs::write(&json_path, v.to_string()).unwrap();
    assert!(err(d).contains("pre_tokenizer"), "{}", err(d));
    // Without tokenizer.json the ranks file is read; two ranks files are ambiguous.
    std::fs::remove_file(&json_path).unwrap();
    assert_eq!(Tokenizer::from_dir(d).unwrap().n_vocab(), 512 + 21);
    std::fs::copy(d.join(HARMONY_RANKS_FILE), d.join("other.tiktoken")).unwrap();
    assert!(err(d).contains("keep one"), "{}", err(d));
    std::fs::remove_file(d.join("other.tiktoken")).unwrap();
    // An eos the specials do not have.
    let cfg_path = d.join("tokenizer_config.json");
    let cfg = std::fs::read_to_string(&cfg_path).unwrap();
    let bad_eos = cfg.replace(
        "\"eos_token\": \"<|return|>\"",
        "\"eos_token\": \"<|nope|>\"",
    );
    assert_ne!(bad_eos, cfg);
    std::fs::write(&cfg_path, bad_eos).unwrap();
    assert!(err(d).contains("eos_token \"<|nope|>\""), "{}", err(d));
}

/// The published vocabulary (all 199 998 o200k_base ranks, the specials at 199998..201088)
/// read from a ranks file encodes every case as tiktoken-rs's built-in `o200k_harmony` does.
/// That table lacks o200k_base's `<|endofprompt|>` (Python tiktoken's has it, at 200018), so
/// texts holding it are left out; its name for each special id is checked against ours.
#[test]
fn published_vocabulary_matches_tiktoken_rs_o200k_harmony() {
    let doc = doc();
    let scratch = memdial_testkit::scratch!("tok-harmony-full");
    let dir = scratch.path().join("published");
    write_harmony_tokenizer_files(&dir, 199_998, SpecialLayout::Published).unwrap();
    let tok = Tokenizer::from_dir(&dir).unwrap();
    let builtin = tiktoken_rs::o200k_harmony_singleton();
    for id in 199_998..201_088u32 {
        let name = builtin.decode(&[id]).unwrap();
        assert_eq!(tok.special_id(&name), Some(id), "{name}");
    }
    let mut compared = 0;
    for c in doc["cases"].as_array().unwrap() {
        let s = c["text"].as_str().unwrap();
        if s.contains("<|endofprompt|>") {
            continue;
        }
        assert_eq!(
            tok.encode(s, true),
            builtin.encode_with_special_tokens(s),
            "{}",
            short(s)
        );
        assert_eq!(
            tok.encode(s, false),
            builtin.encode_ordinary(s),
            "{}",
            short(s)
        );
        compared += 1;
    }
    assert!(compared >= 500, "{compared}");
}
