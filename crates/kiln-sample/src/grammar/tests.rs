use std::sync::Arc;

use proptest::prelude::*;

use super::*;
use crate::vocab::{TokenMask, Vocab};

fn gbnf(src: &str) -> Grammar {
    Grammar::from_gbnf(src).unwrap_or_else(|e| panic!("{e}\n{src}"))
}

fn schema(src: &str) -> Grammar {
    Grammar::from_json_schema(src).unwrap_or_else(|e| panic!("{e}\n{src}"))
}

#[test]
fn gbnf_sequences_classes_and_repetition_match_as_written() {
    let g = gbnf(
        r#"
        # a comment
        root ::= "a" digit+ ( "x" | "y" )?   tail
        digit ::= [0-9]
        tail ::= "-"{0,2}
        "#,
    );
    for ok in ["a1", "a12x", "a0y--", "a9-"] {
        assert!(g.matches(ok.as_bytes()), "{ok}");
    }
    for bad in ["a", "ax", "a1z", "a1---", "b1"] {
        assert!(!g.matches(bad.as_bytes()), "{bad}");
    }
}

#[test]
fn gbnf_classes_are_unicode_and_escapes_decode() {
    let g = gbnf(r#"root ::= [^a\n]+ "\x41" "\u00e9" [\]-]"#);
    assert!(g.matches("é😀bAé]".as_bytes()));
    assert!(g.matches("zAé-".as_bytes()));
    assert!(!g.matches("aAé]".as_bytes()));
    assert!(!g.matches("z\nAé]".as_bytes()));
    let any = gbnf("root ::= .{3}");
    assert!(any.matches("日本語".as_bytes()));
    assert!(!any.matches("日本".as_bytes()));
}

#[test]
fn gbnf_alternatives_may_span_lines_until_the_next_rule() {
    let g = gbnf("root ::= \"a\"\n  | \"b\"\n  | c\nc ::= \"c\"");
    for ok in ["a", "b", "c"] {
        assert!(g.matches(ok.as_bytes()));
    }
}

#[test]
fn gbnf_errors_carry_the_facts() {
    assert!(matches!(
        Grammar::from_gbnf("root ::= \"a\"\n  x ::= [z-a]"),
        Err(GrammarError::Syntax { line: 2, .. })
    ));
    assert_eq!(
        Grammar::from_gbnf("start ::= \"a\"").unwrap_err(),
        GrammarError::MissingRoot
    );
    assert_eq!(
        Grammar::from_gbnf("root ::= item").unwrap_err(),
        GrammarError::UndefinedRule {
            rule: "item".into()
        }
    );
    assert_eq!(
        Grammar::from_gbnf("root ::= root \"a\" | \"a\"").unwrap_err(),
        GrammarError::LeftRecursion {
            rule: "root".into()
        }
    );
    assert_eq!(
        Grammar::from_gbnf("root ::= x? root \"a\" | \"b\"\nx ::= \"x\"").unwrap_err(),
        GrammarError::LeftRecursion {
            rule: "root".into()
        }
    );
    assert_eq!(
        Grammar::from_gbnf("root ::= \"a\" root").unwrap_err(),
        GrammarError::UnproductiveRule {
            rule: "root".into()
        }
    );
    assert!(matches!(
        Grammar::from_gbnf("root ::= \"a\"{3,2}"),
        Err(GrammarError::BadRepetition { min: 3, max: 2 })
    ));
}

#[test]
fn right_recursion_is_fine() {
    let g = gbnf("root ::= \"(\" root \")\" | \"x\"");
    assert!(g.matches(b"((x))"));
    assert!(!g.matches(b"((x)"));
}

#[test]
fn compilation_is_bounded() {
    let tight = CompileLimits {
        max_states: 1000,
        ..CompileLimits::default()
    };
    assert!(matches!(
        Grammar::from_gbnf_with("root ::= [a-z]{0,4000}", &tight),
        Err(GrammarError::TooLarge { .. })
    ));
    assert!(matches!(
        Grammar::from_gbnf("root ::= \"a\"{0,100000}"),
        Err(GrammarError::TooLarge {
            what: "repetition count",
            ..
        })
    ));
    let instant = CompileLimits {
        max_time: std::time::Duration::ZERO,
        ..CompileLimits::default()
    };
    assert!(matches!(
        Grammar::from_gbnf_with("root ::= [a-z]{0,2000}", &instant),
        Err(GrammarError::Timeout { .. })
    ));
}

const PERSON: &str = r#"{
  "type": "object",
  "properties": {
    "name": {"type": "string", "maxLength": 10},
    "age": {"type": "integer"},
    "tags": {"type": "array", "items": {"enum": ["a", "b\"c", 3, null]}, "minItems": 1, "maxItems": 2},
    "ok": {"type": "boolean"}
  },
  "required": ["name", "ok"]
}"#;

#[test]
fn schema_objects_follow_property_order_with_optional_members() {
    let g = schema(PERSON);
    for ok in [
        r#"{"name":"Al","ok":true}"#,
        r#"{"name":"Al","age":-3,"ok":false}"#,
        r#"{ "name": "Al", "tags": ["a", 3], "ok": true }"#,
        "{\n  \"name\": \"\\u00e9\",\n  \"age\": 0,\n  \"tags\": [null],\n  \"ok\": true\n}\n",
        r#"{"name":"b\"c","tags":["b\"c"],"ok":true}"#,
    ] {
        assert!(g.matches(ok.as_bytes()), "{ok}");
    }
    for bad in [
        r#"{"ok":true,"name":"Al"}"#,
        r#"{"name":"Al"}"#,
        r#"{"name":"Al","ok":true,}"#,
        r#"{"name":"Al","tags":[],"ok":true}"#,
        r#"{"name":"Al","tags":["a","a","a"],"ok":true}"#,
        r#"{"name":"Al","tags":["c"],"ok":true}"#,
        r#"{"name":"12345678901","ok":true}"#,
        r#"{"name":"Al","age":01,"ok":true}"#,
        r#"{"name":"Al","age":1.5,"ok":true}"#,
        r#"{"name":"Al","ok":true,"x":1}"#,
        r#"{"name":"\ud800","ok":true}"#,
    ] {
        assert!(!g.matches(bad.as_bytes()), "{bad}");
    }
}

#[test]
fn schema_any_of_refs_types_and_additional_properties() {
    let g = schema(
        r##"{
        "$defs": {"node": {"type": "object", "properties": {"v": {"type": "number"},
                  "next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}},
                  "required": ["v", "next"]}},
        "type": "object",
        "properties": {"head": {"$ref": "#/$defs/node"}, "kind": {"type": ["string", "null"]}},
        "required": ["head"],
        "additionalProperties": {"type": "integer"}
    }"##,
    );
    for ok in [
        r#"{"head":{"v":1,"next":{"v":-2.5e3,"next":null}}}"#,
        r#"{"head":{"v":1,"next":null},"kind":null,"extra":7,"more":8}"#,
        r#"{"head":{"v":1,"next":null},"kind":"x"}"#,
    ] {
        assert!(g.matches(ok.as_bytes()), "{ok}");
    }
    for bad in [
        r#"{"head":{"v":1}}"#,
        r#"{"head":{"v":1,"next":null},"extra":"s"}"#,
    ] {
        assert!(!g.matches(bad.as_bytes()), "{bad}");
    }
    let any = schema("{}");
    assert!(any.matches(br#"{"a":[1,{"b":null}],"c":"d"}"#));
    assert!(any.matches(b"-0.5"));
}

#[test]
fn unsupported_or_invalid_schemas_are_errors_not_ignored() {
    let err = Grammar::from_json_schema(r#"{"not":{"type":"string"}}"#).unwrap_err();
    assert!(
        matches!(&err, GrammarError::UnsupportedSchema { detail, .. } if detail.contains("not")),
        "{err}"
    );
    assert!(matches!(
        Grammar::from_json_schema(r#"{"type":"strin"}"#),
        Err(GrammarError::InvalidSchema { .. })
    ));
    assert!(matches!(
        Grammar::from_json_schema("false"),
        Err(GrammarError::InvalidSchema { .. })
    ));
    assert!(matches!(
        Grammar::from_json_schema("{"),
        Err(GrammarError::SchemaJson(_))
    ));
    assert!(matches!(
        Grammar::from_json_schema(r#"{"$ref":"http://x/y"}"#),
        Err(GrammarError::UnsupportedSchema { .. })
    ));
    // A schema that only refers to itself derives nothing.
    assert!(Grammar::from_json_schema(r##"{"$ref":"#"}"##).is_err());
}

#[test]
fn the_cache_compiles_each_source_once() {
    let cache = GrammarCache::new(2);
    let l = CompileLimits::default();
    let a = cache
        .get_or_compile(GrammarKind::JsonSchema, PERSON, &l)
        .unwrap();
    let b = cache
        .get_or_compile(GrammarKind::JsonSchema, PERSON, &l)
        .unwrap();
    assert!(Arc::ptr_eq(&a, &b));
    cache
        .get_or_compile(GrammarKind::Gbnf, "root ::= \"a\"", &l)
        .unwrap();
    cache
        .get_or_compile(GrammarKind::Gbnf, "root ::= \"b\"", &l)
        .unwrap();
    assert_eq!(cache.len(), 2);
    let c = cache
        .get_or_compile(GrammarKind::JsonSchema, PERSON, &l)
        .unwrap();
    assert!(!Arc::ptr_eq(&a, &c), "evicted as least recently used");
}

/// A vocabulary of every 1–2 character string over a small alphabet, plus multi-byte
/// pieces and an EOG token.
fn small_vocab() -> Arc<Vocab> {
    let alphabet = [
        "{", "}", "[", "]", "\"", ":", ",", " ", "\n", "a", "n", "1", "-", ".", "t", "\\", "é",
    ];
    let mut toks: Vec<Vec<u8>> = vec![Vec::new()]; // id 0: the EOG token (no bytes)
    for a in alphabet {
        toks.push(a.as_bytes().to_vec());
        for b in alphabet {
            toks.push(format!("{a}{b}").into_bytes());
        }
    }
    toks.push("é".as_bytes()[..1].to_vec()); // half a character
    toks.push("\"name\"".into());
    toks.push("true".into());
    toks.push("null".into());
    Arc::new(Vocab::new(toks, &[0]))
}

/// The mask by brute force: a token is allowed iff its bytes keep the match alive.
fn brute_mask(m: &Matcher, v: &Vocab) -> TokenMask {
    let mut out = TokenMask::new(v.len());
    for id in 0..v.len() as u32 {
        let mut probe = m.clone();
        if probe.accept_token(id).is_ok() {
            out.insert(id);
        }
    }
    out
}

#[test]
fn the_trie_mask_equals_brute_force_along_a_document() {
    let v = small_vocab();
    let g = Arc::new(schema(PERSON));
    let mut m = Matcher::new(Arc::clone(&g), Arc::clone(&v)).unwrap();
    let doc = "{\"name\": \"a\\\"é\", \"age\": -11, \"tags\": [\"a\"], \"ok\": true}";
    let mut mask = TokenMask::default();
    for ch in doc.chars() {
        m.fill_mask(&mut mask).unwrap();
        assert_eq!(mask, brute_mask(&m, &v), "before {ch:?}");
        let mut buf = [0u8; 4];
        assert!(m.accept_bytes(ch.encode_utf8(&mut buf).as_bytes()).unwrap());
    }
    m.fill_mask(&mut mask).unwrap();
    assert!(mask.contains(0), "complete: EOG allowed");
    m.accept_token(0).unwrap();
    assert!(m.is_finished());
    m.fill_mask(&mut mask).unwrap();
    assert!(mask.is_empty());
}

proptest! {
    #[test]
    fn masks_from_random_states_equal_brute_force(steps in proptest::collection::vec(0usize..1000, 0..25)) {
        let v = small_vocab();
        let g = Arc::new(schema(r#"{"type":"object","properties":{"name":{"type":"string"},"n":{"type":"number"},"l":{"type":"array","items":{"type":"boolean"}}},"required":["n"]}"#));
        let mut m = Matcher::new(g, Arc::clone(&v)).unwrap();
        let mut mask = TokenMask::default();
        for s in steps {
            m.fill_mask(&mut mask).unwrap();
            prop_assert_eq!(&mask, &brute_mask(&m, &v));
            let allowed: Vec<u32> = mask.iter().collect();
            if allowed.is_empty() {
                break;
            }
            let id = allowed[s % allowed.len()];
            m.accept_token(id).unwrap();
            if m.is_finished() {
                break;
            }
        }
    }
}

#[test]
fn rejected_tokens_leave_the_state_unchanged() {
    let v = small_vocab();
    let g = Arc::new(gbnf("root ::= \"a\" \"1\"+"));
    let mut m = Matcher::new(g, Arc::clone(&v)).unwrap();
    let id = |s: &str| {
        (0..v.len() as u32)
            .find(|&i| v.token_bytes(i) == s.as_bytes())
            .unwrap()
    };
    assert!(matches!(
        m.accept_token(id("1")),
        Err(MatchError::TokenRejected { .. })
    ));
    assert!(m.accept_token(id("a1")).is_ok());
    assert!(m.is_accepting());
    assert!(m.accept_token(id("11")).is_ok());
    assert!(matches!(
        m.accept_token(id("1a")),
        Err(MatchError::TokenRejected { .. })
    ));
    assert!(m.accept_token(0).is_ok());
}

fn accepts(g: &Grammar, ok: &[&str], bad: &[&str]) {
    for s in ok {
        assert!(g.matches(s.as_bytes()), "should accept {s}");
    }
    for s in bad {
        assert!(!g.matches(s.as_bytes()), "should reject {s}");
    }
}

#[test]
fn schema_patterns_match_whole_strings_and_keep_json_escapes() {
    let g = schema(r#"{"type":"string","pattern":"^[A-Z]{2}-\\d{3}(x|yz)?$"}"#);
    accepts(
        &g,
        &[r#""AB-123""#, r#""ZZ-000x""#, r#""QQ-999yz""#],
        &[r#""ab-123""#, r#""AB-12""#, r#""AB-123y""#, r#"xAB-123"#],
    );
    let quote = schema(r#"{"pattern":"a\"b.c"}"#);
    accepts(
        &quote,
        &[r#""a\"bxc""#],
        &[r#""a"bxc""#, r#""a\"b"c""#, "\"a\\\"b\nc\""],
    );
    assert!(matches!(
        Grammar::from_json_schema(r#"{"type":"string","pattern":"\\bword"}"#),
        Err(GrammarError::UnsupportedSchema {
            what: "pattern",
            ..
        })
    ));
    assert!(matches!(
        Grammar::from_json_schema(r#"{"type":"string","pattern":"(unclosed"}"#),
        Err(GrammarError::InvalidSchema { .. })
    ));
}

#[test]
fn schema_formats_accept_their_syntax_only() {
    let cases: &[(&str, &[&str], &[&str])] = &[
        (
            "date",
            &["2024-02-29", "1999-12-31"],
            &["2024-13-01", "2024-1-01", "24-01-01"],
        ),
        (
            "time",
            &["23:59:59Z", "08:00:00.123+02:00"],
            &["24:00:00Z", "08:00:00", "8:00:00Z"],
        ),
        (
            "date-time",
            &["2024-05-01T12:30:00Z"],
            &["2024-05-01 12:30:00Z", "2024-05-01"],
        ),
        (
            "uuid",
            &["123e4567-e89b-12d3-a456-426614174000"],
            &[
                "123e4567e89b12d3a456426614174000",
                "123e4567-e89b-12d3-a456-42661417400g",
            ],
        ),
        (
            "email",
            &["a.b+c@example.co.uk", "x@y.z"],
            &["a@b", "@example.com", "a b@c.d"],
        ),
    ];
    for (format, ok, bad) in cases {
        let g = schema(&format!(r#"{{"type":"string","format":"{format}"}}"#));
        let q = |s: &&str| format!("\"{s}\"");
        let ok: Vec<String> = ok.iter().map(q).collect();
        let bad: Vec<String> = bad.iter().map(q).collect();
        accepts(
            &g,
            &ok.iter().map(String::as_str).collect::<Vec<_>>(),
            &bad.iter().map(String::as_str).collect::<Vec<_>>(),
        );
    }
    // An unknown format stays an annotation.
    accepts(
        &schema(r#"{"type":"string","format":"hostname"}"#),
        &[r#""anything""#],
        &["1"],
    );
}

#[test]
fn schema_integer_bounds_accept_exactly_the_range() {
    let g = schema(r#"{"type":"integer","minimum":-15,"exclusiveMaximum":120}"#);
    accepts(
        &g,
        &["-15", "-1", "0", "7", "99", "119"],
        &["-16", "120", "-0", "007", "1.5"],
    );
    let g = schema(r#"{"type":"integer","exclusiveMinimum":0}"#);
    accepts(&g, &["1", "9999999999999999"], &["0", "-3"]);
    assert!(matches!(
        Grammar::from_json_schema(r#"{"type":"integer","minimum":5,"maximum":4}"#),
        Err(GrammarError::InvalidSchema { .. })
    ));
    assert!(matches!(
        Grammar::from_json_schema(r#"{"type":"number","minimum":0.5}"#),
        Err(GrammarError::UnsupportedSchema { .. })
    ));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn integer_bounds_agree_with_arithmetic(
        lo in -3000i64..3000,
        span in 0i64..5000,
        probes in proptest::collection::vec(-9000i64..9000, 40),
    ) {
        let hi = lo + span;
        let g = schema(&format!(r#"{{"type":"integer","minimum":{lo},"maximum":{hi}}}"#));
        for v in probes.into_iter().chain([lo, hi, lo - 1, hi + 1]) {
            prop_assert_eq!(g.matches(v.to_string().as_bytes()), (lo..=hi).contains(&v), "{} in [{}, {}]", v, lo, hi);
        }
    }
}

#[test]
fn schema_prefix_items_fix_the_leading_items() {
    let g = schema(
        r#"{"type":"array","prefixItems":[{"type":"integer"},{"type":"string"}],"items":false}"#,
    );
    accepts(
        &g,
        &["[]", "[1]", r#"[1, "a"]"#],
        &[r#"["a"]"#, r#"[1, "a", 2]"#, "[1, 2]"],
    );
    let g = schema(
        r#"{"prefixItems":[{"type":"boolean"}],"items":{"type":"null"},"minItems":2,"maxItems":3}"#,
    );
    accepts(
        &g,
        &["[true, null]", "[false,null,null]"],
        &["[true]", "[true, null, null, null]", "[null, null]"],
    );
}

#[test]
fn schema_all_of_merges_object_parts_including_refs() {
    let g = schema(
        r##"{"$defs":{"named":{"type":"object","properties":{"name":{"type":"string"}},"required":["name"]}},
            "allOf":[{"$ref":"#/$defs/named"},{"properties":{"age":{"type":"integer","minimum":0}},"required":["age"]}]}"##,
    );
    accepts(
        &g,
        &[r#"{"name": "a", "age": 3}"#],
        &[
            r#"{"name": "a"}"#,
            r#"{"age": 3}"#,
            r#"{"name": "a", "age": -1}"#,
        ],
    );
    assert!(matches!(
        Grammar::from_json_schema(r#"{"allOf":[{"type":"string"}]}"#),
        Err(GrammarError::UnsupportedSchema { .. })
    ));
}
