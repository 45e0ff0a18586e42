//! The `openai` Python client (the oracle venv, pinned in
//! fixtures/oracle/requirements-base.txt) completes, chats and streams against
//! `memdial serve`; its parsed ids and texts equal `memdial run`'s (`--chat` for
//! the chat request) and its errors are the typed ones it raises for 404/400/401.

mod serve_util;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use memdial_testkit as testkit;
use serde_json::Value;
use serve_util::{Server, BIN};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// `memdial run` on `model` with `args`: (ids, text).
fn run(model: &Path, args: &[&str]) -> (Vec<u64>, String) {
    let o = Command::new(BIN)
        .arg("run")
        .arg("--model")
        .arg(model)
        .args(["--max-tokens", "8", "--output", "json"])
        .args(args)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", testkit::output_text(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        v["stopped_on_eos"], false,
        "pick a prompt that does not stop on eos"
    );
    let ids = v["output_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i.as_u64().unwrap())
        .collect();
    (ids, v["text"].as_str().unwrap().to_string())
}

fn ids(v: &Value) -> Vec<u64> {
    v.as_array()
        .expect("token_ids")
        .iter()
        .map(|i| i.as_u64().unwrap())
        .collect()
}

fn openai_client_completes_chats_and_streams() -> testkit::Outcome {
    let py = match testkit::oracle::python(&repo()) {
        Ok(p) => p,
        Err(why) => return testkit::skip(why),
    };
    let d = testkit::until_exit(testkit::scratch!("serve-openai")).join("tiny-k3");
    let model = testkit::fixture(BIN, "tiny-k3", &d);
    let (prompt, system) = ("The capital of France is", "Answer briefly.");
    let (want_ids, want_text) = run(&model, &["--prompt", prompt]);
    let (chat_ids, chat_text) = run(&model, &["--chat", "--system", system, "--prompt", prompt]);
    let s = Server::start(&model, &["--api-key", "sk-memdial-test"]);
    let o = Command::new(&py)
        .arg(repo().join("fixtures/oracle/openai_client.py"))
        .arg(format!("http://127.0.0.1:{}/v1", s.port))
        .args(["sk-memdial-test", "tiny-k3", prompt, system])
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{}\nserver log:\n{}",
        testkit::output_text(&o),
        s.log()
    );
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["models"], serde_json::json!(["tiny-k3"]));
    let c = &v["completion"];
    assert_eq!(c["object"], "text_completion");
    assert_eq!(ids(&c["token_ids"]), want_ids);
    assert_eq!(c["text"], want_text.as_str());
    assert_eq!(c["finish_reason"], "length");
    assert_eq!(c["usage"]["completion_tokens"], 8);
    assert_eq!(c["n_top"], serde_json::json!(vec![2; 8]));
    let ch = &v["chat"];
    assert_eq!(ch["object"], "chat.completion");
    assert_eq!(ch["role"], "assistant");
    assert_eq!(ids(&ch["token_ids"]), chat_ids);
    assert_eq!(ch["text"], chat_text.as_str());
    let cs = &v["chat_stream"];
    assert_eq!(cs["text"], ch["text"]);
    assert_eq!(cs["finish_reason"], ch["finish_reason"]);
    assert_eq!(cs["usage"], ch["usage"]);
    assert_eq!(v["completion_stream"]["text"], c["text"]);
    let e = &v["errors"];
    assert_eq!(
        e["unknown_model"],
        serde_json::json!([404, "model_not_found"])
    );
    assert_eq!(e["n2"], serde_json::json!([400, "n"]));
    assert_eq!(e["wrong_key"], serde_json::json!([401, "invalid_api_key"]));
    Ok(testkit::Completion::Completed)
}

fn main() -> ExitCode {
    testkit::main(
        include_str!("serve_openai.rs"),
        vec![testkit::ignorable(
            "openai_client_completes_chats_and_streams",
            openai_client_completes_chats_and_streams,
        )],
    )
}
