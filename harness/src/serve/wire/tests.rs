//! Unit tests of `wire`.

use super::*;

fn parse_c(s: &str) -> Result<GenRequest, ApiError> {
    parse(Endpoint::Completions, s.as_bytes())
}

#[test]
fn prompt_forms() {
    let r = parse_c(r#"{"model":"m","prompt":"hi"}"#).unwrap();
    assert_eq!(r.prompt, Prompt::Text("hi".into()));
    assert_eq!(r.temperature, 1.0);
    let r = parse_c(r#"{"model":"m","prompt":[1,2,3]}"#).unwrap();
    assert_eq!(r.prompt, Prompt::Ids(vec![1, 2, 3]));
    let r = parse_c(r#"{"model":"m","prompt":[[4,5]]}"#).unwrap();
    assert_eq!(r.prompt, Prompt::Ids(vec![4, 5]));
    let r = parse_c(r#"{"model":"m","prompt":["x"]}"#).unwrap();
    assert_eq!(r.prompt, Prompt::Text("x".into()));
    for bad in [
        r#"{"model":"m","prompt":["a","b"]}"#,
        r#"{"model":"m","prompt":[1,-2]}"#,
        r#"{"model":"m","prompt":[]}"#,
        r#"{"model":"m","prompt":""}"#,
        r#"{"model":"m","prompt":{}}"#,
    ] {
        assert_eq!(
            parse_c(bad).unwrap_err().param.as_deref(),
            Some("prompt"),
            "{bad}"
        );
    }
}

#[test]
fn chat_logprobs_need_the_flag() {
    let e = parse(
        Endpoint::Chat,
        br#"{"model":"m","messages":[{"role":"user","content":"x"}],"top_logprobs":2}"#,
    )
    .unwrap_err();
    assert_eq!(e.param.as_deref(), Some("top_logprobs"));
    let r = parse(Endpoint::Chat, br#"{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}],"logprobs":true,"top_logprobs":2}"#).unwrap();
    assert_eq!(r.logprobs, Some(2));
    assert_eq!(
        r.prompt,
        Prompt::Messages(vec![("user".into(), "ab".into())])
    );
}

#[test]
fn text_offsets_count_characters() {
    let t = |s: &str| TokenLogprobs {
        text: s.into(),
        bytes: s.as_bytes().to_vec(),
        logprob: -1.0,
        top: vec![],
    };
    let v = logprobs(Endpoint::Completions, &[t("é"), t("b")], 3);
    assert_eq!(v["text_offset"], json!([3, 4]));
}
