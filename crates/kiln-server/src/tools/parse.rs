//! The call part of a reply split into content and tool calls, by family.

use std::collections::BTreeMap;

use serde_json::Value;
use serde_json::value::RawValue;

use super::family::Family;

/// One parsed call: the function's name and its arguments as JSON text.
#[derive(Clone, Debug, PartialEq)]
pub struct ParsedCall {
    pub name: String,
    pub arguments: String,
}

/// JSON text as written, without the whitespace between its tokens (string contents are
/// kept exactly). A call's `arguments` are the model's own text in this form, so a stream
/// can forward them as they are generated and the fragments add up to the same string.
pub fn compact(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    let (mut in_string, mut escape) = (false, false);
    for c in json.chars() {
        if in_string {
            if escape {
                escape = false;
            } else if c == '\\' {
                escape = true;
            } else if c == '"' {
                in_string = false;
            }
        } else if c == '"' {
            in_string = true;
        } else if matches!(c, ' ' | '\t' | '\n' | '\r') {
            continue;
        }
        out.push(c);
    }
    out
}

/// One call object `{"name": …, <key>: {…}}` (`arguments` may also be a JSON string).
fn call_of(raw: &RawValue, key: &str) -> Option<ParsedCall> {
    let obj: BTreeMap<String, Box<RawValue>> = serde_json::from_str(raw.get()).ok()?;
    let name = serde_json::from_str::<String>(obj.get("name")?.get()).ok()?;
    let args = obj
        .get(key)
        .or_else(|| obj.get("arguments"))
        .or_else(|| obj.get("parameters"))?;
    let arguments = match serde_json::from_str::<Value>(args.get()).ok()? {
        Value::String(s) => {
            // Some models quote the arguments; keep them only if they are JSON.
            serde_json::from_str::<Value>(&s).ok()?;
            s
        }
        Value::Object(_) => compact(args.get()),
        _ => return None,
    };
    Some(ParsedCall { name, arguments })
}

/// The JSON values written back to back in `text` (separated by whitespace, `,` or `;`),
/// as written, or `None` if anything else is there.
fn json_values(text: &str) -> Option<Vec<Box<RawValue>>> {
    let mut out = Vec::new();
    let mut rest = text.trim();
    while !rest.is_empty() {
        let mut it = serde_json::Deserializer::from_str(rest).into_iter::<Box<RawValue>>();
        let v = it.next()?.ok()?;
        out.push(v);
        rest = rest[it.byte_offset()..]
            .trim_start_matches(|c: char| c.is_whitespace() || c == ';' || c == ',');
    }
    Some(out)
}

/// Calls written as bare JSON objects (after an optional `<|python_tag|>`), the whole reply.
fn bare_calls(text: &str, key: &str) -> Option<(String, Vec<ParsedCall>)> {
    let body = text.trim_start();
    let body = body.strip_prefix("<|python_tag|>").unwrap_or(body);
    if !body.trim_start().starts_with('{') {
        return None;
    }
    let calls = json_values(body)?
        .iter()
        .map(|v| call_of(v, key))
        .collect::<Option<Vec<_>>>()?;
    Some((String::new(), calls))
}

/// Splits `text` (the whole reply, including any prefix that was put in the prompt) by the
/// family's call syntax. Text that does not parse as calls stays content.
pub fn parse(family: Family, text: &str) -> (String, Vec<ParsedCall>) {
    let whole = || (text.to_string(), Vec::new());
    match family {
        Family::Hermes => {
            let Some(start) = text.find("<tool_call>") else {
                return bare_calls(text, "arguments").unwrap_or_else(whole);
            };
            let mut calls = Vec::new();
            for block in text[start..].split("<tool_call>").skip(1) {
                let body = block.split("</tool_call>").next().unwrap_or("");
                let Some(vs) = json_values(body) else {
                    return whole();
                };
                for v in vs {
                    match call_of(&v, "arguments") {
                        Some(c) => calls.push(c),
                        None => return whole(),
                    }
                }
            }
            (text[..start].trim_end().to_string(), calls)
        }
        Family::Mistral => {
            let Some(start) = text.find("[TOOL_CALLS]") else {
                return whole();
            };
            let body = &text[start + "[TOOL_CALLS]".len()..];
            let Some(vs) = json_values(body) else {
                return whole();
            };
            let mut calls = Vec::new();
            for v in vs {
                let items = if v.get().starts_with('[') {
                    match serde_json::from_str::<Vec<Box<RawValue>>>(v.get()) {
                        Ok(items) => items,
                        Err(_) => return whole(),
                    }
                } else {
                    vec![v]
                };
                for item in &items {
                    match call_of(item, "arguments") {
                        Some(c) => calls.push(c),
                        None => return whole(),
                    }
                }
            }
            (text[..start].trim_end().to_string(), calls)
        }
        Family::Llama3 => bare_calls(text, "parameters").unwrap_or_else(whole),
        Family::Generic => {
            let body = text.trim();
            if !body.starts_with('{') {
                return whole();
            }
            let Ok(v) = serde_json::from_str::<BTreeMap<String, Box<RawValue>>>(body) else {
                return whole();
            };
            let list = match (v.get("tool_calls"), v.get("tool_call")) {
                (Some(l), _) if l.get().starts_with('[') => {
                    match serde_json::from_str::<Vec<Box<RawValue>>>(l.get()) {
                        Ok(l) => l,
                        Err(_) => return whole(),
                    }
                }
                (_, Some(c)) => vec![c.clone()],
                _ => return whole(),
            };
            let mut calls = Vec::new();
            for item in &list {
                match call_of(item, "arguments") {
                    Some(c) => calls.push(c),
                    None => return whole(),
                }
            }
            (String::new(), calls)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(name: &str, arguments: &str) -> ParsedCall {
        ParsedCall {
            name: name.into(),
            arguments: arguments.into(),
        }
    }

    #[test]
    fn hermes_blocks_become_calls_and_the_text_before_them_content() {
        let (content, calls) = parse(
            Family::Hermes,
            "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"t\", \"arguments\": {}}\n</tool_call>",
        );
        assert_eq!(content, "Let me look.");
        assert_eq!(
            calls,
            [call("get_weather", r#"{"city":"Paris"}"#), call("t", "{}")]
        );
    }

    #[test]
    fn hermes_calls_without_their_tags_are_read_as_bare_json() {
        let (content, calls) = parse(
            Family::Hermes,
            "{\"name\": \"f\", \"arguments\": {\"a\": 1}}",
        );
        assert_eq!(
            (content.as_str(), calls),
            ("", vec![call("f", r#"{"a":1}"#)])
        );
        assert!(parse(Family::Hermes, "{\"not\": \"a call\"}").1.is_empty());
    }

    #[test]
    fn a_call_block_that_is_not_json_leaves_the_reply_as_content() {
        let text = "<tool_call>\n{\"name\": \"f\", \"argu";
        assert_eq!(parse(Family::Hermes, text), (text.to_string(), vec![]));
        assert_eq!(
            parse(Family::Hermes, "no call here"),
            ("no call here".into(), vec![])
        );
    }

    #[test]
    fn llama3_json_objects_with_parameters_are_calls() {
        let (content, calls) = parse(
            Family::Llama3,
            "<|python_tag|>{\"name\": \"f\", \"parameters\": {\"x\": 1}}; {\"name\": \"g\", \"parameters\": {}}",
        );
        assert_eq!(content, "");
        assert_eq!(calls, [call("f", r#"{"x":1}"#), call("g", "{}")]);
        assert_eq!(parse(Family::Llama3, "Hello {there}").1, vec![]);
    }

    #[test]
    fn mistral_tool_calls_arrays_are_calls() {
        let (content, calls) = parse(
            Family::Mistral,
            "[TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {\"a\": \"b\"}}, {\"name\": \"g\", \"arguments\": \"{}\"}]",
        );
        assert_eq!(content, "");
        assert_eq!(calls, [call("f", r#"{"a":"b"}"#), call("g", "{}")]);
    }

    #[test]
    fn generic_replies_are_calls_only_when_the_whole_reply_is_the_call_object() {
        let (_, calls) = parse(
            Family::Generic,
            r#"{"tool_calls": [{"name": "f", "arguments": {"q": 2}}]}"#,
        );
        assert_eq!(calls, [call("f", r#"{"q":2}"#)]);
        assert!(parse(Family::Generic, r#"{"answer": 1}"#).1.is_empty());
    }
}
