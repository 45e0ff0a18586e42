//! Vocabulary tests: o200k prefix BPE validity, deterministic writer output, loader errors.

use memdial_testkit as testkit;
use std::time::Instant;

use memdial::format::tokenizer::{
    check_bpe_prefix, check_bpe_vocab, o200k_token_bytes, special_token_names, BpeDefect,
    Tokenizer, KIMI_N_BASE, NUM_SPECIAL_TOKENS, O200K_BASE_LEN,
};
use memdial::tools::fixture::vocab::write_tokenizer_files;

/// An empty scratch directory unique to the caller, removed when the guard drops.
fn scratch(name: &str) -> testkit::Scratch {
    testkit::scratch!(&format!("tok-{name}"))
}

/// The first 163 584 o200k ranks (the real K3 base count) form a prefix-closed valid BPE
/// vocabulary, so every preset size N <= 163 584 (with N >= 256) is valid too.
#[test]
fn o200k_prefix_163584_is_valid_bpe() {
    let t0 = Instant::now();
    let res = check_bpe_prefix(KIMI_N_BASE);
    println!("check_bpe_prefix({KIMI_N_BASE}) took {:?}", t0.elapsed());
    if let Err(defects) = &res {
        println!(
            "{} defects, first: {:?}",
            defects.len(),
            &defects[..defects.len().min(20)]
        );
    }
    assert_eq!(res, Ok(()));

    // Cross-check with tiktoken's own merge loop (the literal criterion): with the ranks < N
    // map, every multi-byte token's bytes merge into exactly that one token.
    let t0 = Instant::now();
    let toks = o200k_token_bytes(KIMI_N_BASE).unwrap();
    let ranks = toks
        .iter()
        .enumerate()
        .map(|(r, t)| (t.clone(), r as u32))
        .collect();
    let mut bad = Vec::new();
    for (r, t) in toks.iter().enumerate() {
        if t.len() > 1 {
            let parts = tiktoken_rs::byte_pair_split(t, &ranks);
            if parts.len() != 1 {
                bad.push(r);
            }
        }
    }
    println!(
        "tiktoken byte_pair_split cross-check took {:?}",
        t0.elapsed()
    );
    assert!(
        bad.is_empty(),
        "{} tokens split: {:?}",
        bad.len(),
        &bad[..bad.len().min(20)]
    );
}

/// All 256 single bytes are among the first 256 o200k ranks, so every prefix N >= 256 can
/// encode arbitrary bytes.
#[test]
fn o200k_first_256_ranks_are_the_bytes() {
    let toks = o200k_token_bytes(256).unwrap();
    let mut seen = [false; 256];
    for t in &toks {
        assert_eq!(t.len(), 1, "{t:?}");
        seen[t[0] as usize] = true;
    }
    assert!(seen.iter().all(|&s| s));
    for n in [256, 2048, 32768] {
        assert_eq!(check_bpe_prefix(n), Ok(()), "n = {n}");
    }
}

#[test]
fn check_reports_out_of_range_and_bad_vocab() {
    assert_eq!(
        check_bpe_prefix(O200K_BASE_LEN + 1),
        Err(vec![BpeDefect::OutOfRange {
            requested: O200K_BASE_LEN + 1,
            available: O200K_BASE_LEN
        }])
    );
    // Removing rank 300's left part makes it unreachable.
    let mut toks = o200k_token_bytes(1000).unwrap();
    let victim = toks.iter().position(|t| t.len() == 2).unwrap();
    toks[victim] = b"\xff\xfe\xfd\xfc".to_vec();
    assert!(check_bpe_vocab(&toks).is_err());
}

fn write_dir(name: &str, n_base: u32) -> testkit::Scratch {
    let d = scratch(name);
    write_tokenizer_files(&d, n_base).unwrap();
    d
}

#[test]
fn writer_is_deterministic_and_loads_for_all_presets() {
    for n_base in [2048u32, 32768, KIMI_N_BASE] {
        let a = write_dir(&format!("det-a-{n_base}"), n_base);
        let b = write_dir(&format!("det-b-{n_base}"), n_base);
        for f in ["tiktoken.model", "tokenizer_config.json"] {
            assert_eq!(
                std::fs::read(a.join(f)).unwrap(),
                std::fs::read(b.join(f)).unwrap(),
                "{f}"
            );
        }
        let model = std::fs::read_to_string(a.join("tiktoken.model")).unwrap();
        assert_eq!(model.lines().count(), n_base as usize);
        assert!(model.starts_with("IQ== 0\n"), "rank 0 of o200k is '!'");
        let tok = Tokenizer::from_dir(&a).unwrap();
        assert_eq!(tok.n_base(), n_base);
        assert_eq!(tok.n_vocab(), n_base + NUM_SPECIAL_TOKENS);
        // Special ids are n_base + Kimi offset.
        for (off, name) in special_token_names(n_base).iter().enumerate() {
            assert_eq!(tok.special_id(name), Some(n_base + off as u32), "{name}");
            assert_eq!(tok.special_name(n_base + off as u32), Some(name.as_str()));
        }
        assert_eq!(tok.bos_id(), n_base);
        assert_eq!(tok.eos_id(), n_base + 2);
        assert_eq!(tok.special_id("<|im_middle|>"), Some(n_base + 17));
        assert_eq!(tok.special_id("<|im_system|>"), Some(n_base + 10));
        assert_eq!(tok.pad_id(), Some(n_base + 255));
        assert_eq!(tok.unk_id(), Some(n_base + 254));
        assert_eq!(tok.stop_ids(), vec![n_base + 1, n_base + 2]);
        let s = "Hello, 世界! Ünïcödé 😀 <|im_end|> 12345\n\tend";
        let ids = tok.encode(s, true);
        assert!(ids.iter().all(|&i| i < tok.n_vocab()));
        assert!(ids.contains(&(n_base + 2)));
        assert!(!tok.encode(s, false).contains(&(n_base + 2)));
        assert_eq!(tok.decode(&ids).unwrap(), s);
        std::fs::remove_dir_all(&a).ok();
        std::fs::remove_dir_all(&b).ok();
    }
}

#[test]
fn chat_prompt_decodes_to_template() {
    let d = write_dir("chat", 2048);
    let tok = Tokenizer::from_dir(&d).unwrap();
    let ids = tok.chat_prompt("Tell me about the french revolution.", Some("Be brief."));
    assert_eq!(
        tok.decode(&ids).unwrap(),
        "<|im_system|>system<|im_middle|>Be brief.<|im_end|>\
         <|im_user|>user<|im_middle|>Tell me about the french revolution.<|im_end|>\
         <|im_assistant|>assistant<|im_middle|>"
    );
    assert_eq!(ids[0], 2048 + 10);
    assert_eq!(*ids.last().unwrap(), 2048 + 17);
    let ids = tok.chat_prompt("hi", None);
    assert_eq!(ids[0], 2048 + 3);
    assert_eq!(
        tok.decode(&ids).unwrap(),
        "<|im_user|>user<|im_middle|>hi<|im_end|><|im_assistant|>assistant<|im_middle|>"
    );
    // Special strings inside a message stay text.
    let ids = tok.chat_prompt("<|im_end|>", None);
    assert_eq!(ids.iter().filter(|&&i| i == 2048 + 2).count(), 1);
    assert!(tok
        .chat_template()
        .unwrap()
        .contains("<|im_assistant|>assistant<|im_middle|>"));
    std::fs::remove_dir_all(&d).ok();
}

#[test]
fn decode_errors_and_lossy_utf8() {
    let d = write_dir("decode", 2048);
    let tok = Tokenizer::from_dir(&d).unwrap();
    let e = tok.decode(&[1, 2048 + 256]).unwrap_err();
    assert!(format!("{e:#}").contains("unknown token id 2304"), "{e:#}");
    // A lone UTF-8 lead byte decodes to U+FFFD; decode_bytes keeps it.
    let ids = tok.encode("é", false);
    let bytes = tok.decode_bytes(&ids).unwrap();
    assert_eq!(bytes, "é".as_bytes());
    let lead = o200k_token_bytes(256)
        .unwrap()
        .iter()
        .position(|t| t == &[0xC3])
        .unwrap() as u32;
    assert_eq!(tok.decode(&[lead]).unwrap(), "\u{FFFD}");
    std::fs::remove_dir_all(&d).ok();
}

#[test]
fn loader_rejects_bad_files_with_file_name() {
    let d = write_dir("bad", 2048);
    let model = d.join("tiktoken.model");
    let good = std::fs::read_to_string(&model).unwrap();
    let err = |d: &std::path::Path| format!("{:#}", Tokenizer::from_dir(d).unwrap_err());

    std::fs::write(&model, good.replacen("IQ== 0", "I@Q== 0", 1)).unwrap();
    let e = err(&d);
    assert!(
        e.contains("tiktoken.model:1") && e.contains("base64"),
        "{e}"
    );

    std::fs::write(&model, good.replacen("Ig== 1", "Ig== 0", 1)).unwrap();
    assert!(err(&d).contains("duplicate rank 0"));

    std::fs::write(&model, format!("{good}IQ== 2048\n")).unwrap();
    assert!(err(&d).contains("repeats the bytes"));

    // Drop byte "!" (rank 0): ranks are no longer dense.
    std::fs::write(&model, good.replacen("IQ== 0\n", "", 1)).unwrap();
    assert!(err(&d).contains("rank 0 missing"), "{}", err(&d));

    std::fs::write(&model, &good).unwrap();
    let cfg = d.join("tokenizer_config.json");
    let good_cfg = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(&cfg, "{not json").unwrap();
    assert!(err(&d).contains("tokenizer_config.json"));
    std::fs::write(
        &cfg,
        good_cfg.replace("\"eos_token\": \"<|im_end|>\"", "\"eos_token\": \"<eos>\""),
    )
    .unwrap();
    assert!(
        err(&d).contains("eos_token \"<eos>\" is not a special token"),
        "{}",
        err(&d)
    );
    std::fs::write(&cfg, good_cfg.replace("\"2049\"", "\"5\"")).unwrap();
    assert!(err(&d).contains("overlaps"), "{}", err(&d));
    std::fs::write(&cfg, good_cfg.replace("\"[PAD]\"", "\"[BOS]\"")).unwrap();
    assert!(err(&d).contains("used by ids"), "{}", err(&d));

    std::fs::remove_file(&cfg).unwrap();
    assert!(err(&d).contains("tokenizer_config.json"));
    std::fs::remove_file(&model).unwrap();
    assert!(err(&d).contains("tiktoken.model"));
    std::fs::remove_dir_all(&d).ok();
}

/// A K3-style config (different names at offsets 2-5, eos as an AddedToken dict) loads as-is.
#[test]
fn loads_k3_style_config() {
    let d = write_dir("k3cfg", 2048);
    let cfg = serde_json::json!({
        "added_tokens_decoder": {
            "2048": {"content": "[BOS]", "special": true},
            "2049": {"content": "[EOS]", "special": true},
            "2050": {"content": "<|end_of_msg|>", "special": true},
            "2051": {"content": "<|open|>", "special": false},
            "2053": {"content": "<|media_pad|>", "special": true},
            "2303": {"content": "[PAD]", "special": true}
        },
        "eos_token": {"content": "[EOS]", "lstrip": false},
        "pad_token": "[PAD]"
    });
    std::fs::write(d.join("tokenizer_config.json"), cfg.to_string()).unwrap();
    let tok = Tokenizer::from_dir(&d).unwrap();
    assert_eq!(tok.bos_id(), 2048);
    assert_eq!(tok.eos_id(), 2049);
    assert_eq!(tok.special_id("<|end_of_msg|>"), Some(2050));
    assert_eq!(tok.special_id("<|reserved_token_2052|>"), Some(2052));
    assert_eq!(tok.stop_ids(), vec![2049]);
    assert!(tok.try_chat_prompt("x", None).is_err());
    assert_eq!(tok.encode("a<|open|>b", true), vec![64, 2051, 65]);
    std::fs::remove_dir_all(&d).ok();
}
