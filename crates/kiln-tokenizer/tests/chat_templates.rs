//! Chat templates rendered exactly as Hugging Face transformers' `apply_chat_template`
//! renders them (fixtures by `tests/fixtures/chat/gen_chat_fixtures.py`): SmolLM2's and
//! Qwen2.5's templates read from their GGUFs, and the Gemma 3 template; the prompt ids
//! must equal transformers' too. Templates that raise must fail here as well.

mod common;

use std::path::{Path, PathBuf};

use common::{gguf, ids, tokenizer};
use kiln_tokenizer::chat::{ChatError, ChatTemplate, Conversation, RenderOptions, SpecialTokens};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/chat")
}

fn renderings() -> serde_json::Value {
    let path = fixtures().join("renderings.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).expect("renderings.json is JSON")
}

/// The case's conversation; messages and tools are JSON text in the fixture, so that
/// their key order (which `tojson` shows) reaches the template as written.
fn conversation(case: &serde_json::Value) -> Conversation {
    let mut conv =
        Conversation::from_json(case["messages"].as_str().expect("messages")).expect("messages");
    if let Some(tools) = case["tools"].as_str() {
        conv.set_tools_json(tools).expect("tools");
    }
    conv
}

/// Renders every case of `model` and compares; `tok` also checks the prompt ids.
fn check(model: &str, tmpl: &ChatTemplate, tok: Option<&kiln_tokenizer::Tokenizer>) {
    let doc = renderings();
    let cases = doc["models"][model]["cases"].as_array().expect("cases");
    let mut failures = Vec::new();
    let (mut texts, mut errors) = (0, 0);
    for case in cases {
        let name = case["name"].as_str().expect("name");
        let opts = RenderOptions {
            add_generation_prompt: case["add_generation_prompt"].as_bool().expect("bool"),
            ..RenderOptions::default()
        };
        let got = tmpl.render(&conversation(case), &opts);
        match (&got, case.get("text").and_then(|t| t.as_str())) {
            (Ok(text), Some(want)) => {
                if text != want {
                    failures.push(format!("{name}:\n   got  {text:?}\n   want {want:?}"));
                    continue;
                }
                texts += 1;
                if let Some(tok) = tok {
                    let got_ids = tmpl.prompt_tokens(tok, text).expect("encode");
                    let want_ids = ids(&case["ids"]);
                    if got_ids != want_ids {
                        failures.push(format!(
                            "{name} ids:\n   got  {got_ids:?}\n   want {want_ids:?}"
                        ));
                    }
                }
            }
            (Err(e), None) => {
                // The template raised in Python too; its own message must come through.
                let want = case["error"].as_str().expect("error");
                let ChatError::Template { message, line, .. } = e else {
                    failures.push(format!("{name}: not a template error: {e}"));
                    continue;
                };
                if want.starts_with("Conversation roles") && message != want {
                    failures.push(format!("{name}: message {message:?}, want {want:?}"));
                }
                if line.is_none() {
                    failures.push(format!("{name}: the error names no line: {e}"));
                }
                errors += 1;
            }
            (Ok(text), None) => failures.push(format!("{name}: rendered {text:?}, want an error")),
            (Err(e), Some(_)) => failures.push(format!("{name}: {e}")),
        }
    }
    eprintln!("{model}: {texts} renderings and {errors} errors match transformers");
    assert!(failures.is_empty(), "{model}:\n{}", failures.join("\n"));
}

fn gguf_template(model: &str) -> ChatTemplate {
    ChatTemplate::from_gguf(gguf(model).metadata(), tokenizer(model))
        .expect("template loads")
        .expect("the GGUF has a template")
}

#[test]
fn smollm2_gguf_template_renders_like_transformers() {
    check(
        "smollm2-135m",
        &gguf_template("smollm2-135m"),
        Some(tokenizer("smollm2-135m")),
    );
}

#[test]
fn qwen25_gguf_template_renders_like_transformers() {
    let model = "qwen2.5-coder-0.5b";
    check(model, &gguf_template(model), Some(tokenizer(model)));
}

#[test]
fn gemma3_template_renders_like_transformers() {
    let source = std::fs::read_to_string(fixtures().join("gemma3.jinja")).expect("template");
    let special = SpecialTokens::of(tokenizer("gemma3-270m"));
    let want = &renderings()["models"]["gemma3"]["special_tokens"];
    for (k, v) in [
        ("bos_token", &special.bos_token),
        ("eos_token", &special.eos_token),
        ("unk_token", &special.unk_token),
        ("pad_token", &special.pad_token),
    ] {
        assert_eq!(
            v.as_deref(),
            want[k].as_str(),
            "{k} of the Gemma vocabulary"
        );
    }
    let tmpl = ChatTemplate::new(source, "gemma3.jinja", special).expect("compiles");
    check("gemma3", &tmpl, None);
}

#[test]
fn gemma3_prompt_has_one_bos() {
    // The template writes `<bos>` and the vocabulary adds BOS: llama.cpp drops the text.
    let tok = tokenizer("gemma3-270m");
    let source = std::fs::read_to_string(fixtures().join("gemma3.jinja")).expect("template");
    let tmpl = ChatTemplate::new(source, "gemma3.jinja", SpecialTokens::of(tok)).expect("ok");
    let mut conv = Conversation::new();
    conv.push("user", "Hi");
    let text = tmpl
        .render(&conv, &RenderOptions::generation())
        .expect("render");
    let ids = tmpl.prompt_tokens(tok, &text).expect("encode");
    let bos = tok.bos().expect("gemma has BOS");
    assert_eq!(ids.iter().filter(|&&i| i == bos).count(), 1, "{ids:?}");
    assert_eq!(ids[0], bos);
}

#[test]
fn gemma3_gguf_has_no_template_and_says_so() {
    let got = ChatTemplate::from_gguf(gguf("gemma3-270m").metadata(), tokenizer("gemma3-270m"))
        .expect("reads");
    assert!(got.is_none());
}

#[test]
fn hf_directory_templates_are_found_in_transformers_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = |template: serde_json::Value| {
        let doc = serde_json::json!({"bos_token": "<s>", "eos_token": {"content": "</s>"},
                                     "chat_template": template});
        std::fs::write(dir.path().join("tokenizer_config.json"), doc.to_string()).expect("write");
    };
    let mut conv = Conversation::new();
    conv.push("user", "x");
    let render = |t: &ChatTemplate| t.render(&conv, &RenderOptions::default()).expect("render");

    assert!(
        ChatTemplate::from_hf_dir(dir.path())
            .expect("reads")
            .is_none()
    );

    config(serde_json::json!("A{{ bos_token }}{{ eos_token }}"));
    let t = ChatTemplate::from_hf_dir(dir.path())
        .expect("reads")
        .expect("found");
    assert_eq!(render(&t), "A<s></s>");

    config(serde_json::json!([{"name": "default", "template": "B"},
                              {"name": "tool_use", "template": "T{{ tools | length }}"}]));
    let t = ChatTemplate::from_hf_dir(dir.path())
        .expect("reads")
        .expect("found");
    assert_eq!(render(&t), "B");
    let mut with_tools = Conversation::new();
    with_tools.push("user", "x");
    with_tools.set_tools_json("[{}, {}]").expect("json");
    assert_eq!(
        t.render(&with_tools, &RenderOptions::default())
            .expect("ok"),
        "T2"
    );

    std::fs::write(
        dir.path().join("chat_template.jinja"),
        "C{{ messages | length }}\n",
    )
    .expect("write");
    let t = ChatTemplate::from_hf_dir(dir.path())
        .expect("reads")
        .expect("found");
    assert_eq!(
        render(&t),
        "C1",
        "chat_template.jinja wins, its last newline dropped"
    );
}

#[test]
fn a_named_template_that_does_not_exist_lists_the_ones_that_do() {
    let t = ChatTemplate::new("x", "test", SpecialTokens::default()).expect("ok");
    let opts = RenderOptions {
        template_name: Some("rag".into()),
        ..RenderOptions::default()
    };
    let err = t
        .render(&Conversation::new(), &opts)
        .unwrap_err()
        .to_string();
    assert!(err.contains("rag") && err.contains("default"), "{err}");
}

#[test]
fn a_template_that_would_loop_for_hours_stops_at_the_step_limit() {
    use kiln_tokenizer::chat::MAX_TEMPLATE_STEPS;
    let source = "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}";
    let t = ChatTemplate::new(source, "hostile.gguf", SpecialTokens::default()).expect("parses");
    let err = t
        .render(&Conversation::new(), &RenderOptions::generation())
        .expect_err("10^10 iterations are refused");
    let msg = err.to_string();
    assert!(
        matches!(err, ChatError::Template { .. })
            && msg.contains("MAX_TEMPLATE_STEPS")
            && msg.contains(&MAX_TEMPLATE_STEPS.to_string())
            && msg.contains("hostile.gguf"),
        "{msg}"
    );
}

#[test]
fn a_long_conversation_with_tools_renders_well_within_the_step_limit() {
    let model = "qwen2.5-coder-0.5b";
    let tmpl = gguf_template(model);
    let mut conv = Conversation::new();
    conv.set_tools_json(
        r#"[{"type":"function","function":{"name":"get_weather","description":"Weather of a city",
            "parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}]"#,
    )
    .expect("tools");
    for i in 0..200 {
        let role = if i % 2 == 0 { "user" } else { "assistant" };
        conv.push(role, &format!("message number {i} with some words in it"));
    }
    let text = tmpl
        .render(&conv, &RenderOptions::generation())
        .expect("a 200-message conversation renders");
    assert!(text.contains("message number 199") && text.contains("get_weather"));
}
