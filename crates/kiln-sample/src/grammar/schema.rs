//! JSON schema → grammar, for the subset structured-output APIs use: `type` (object,
//! array, string, number, integer, boolean, null, or a list of them), `enum`, `const`,
//! `properties` (written in schema order), `required`, `additionalProperties`, `items`,
//! `prefixItems`, `minItems`/`maxItems`, `minLength`/`maxLength`, `pattern` (matched as a
//! whole string), `format` (date, time, date-time, uuid, email), integer `minimum` /
//! `maximum` / `exclusiveMinimum` / `exclusiveMaximum`, `anyOf`/`oneOf`, `allOf` of object
//! schemas, local `$ref` (`#/$defs/…`, `#/definitions/…`, `#`), and boolean schemas.
//!
//! Annotations (`title`, `description`, `default`, `examples`, other `format`s, …) are
//! ignored, as the specification allows; any other keyword is an error naming it, never
//! ignored.
//!
//! Whitespace between tokens is optional and bounded (a space, or a newline and up to 20
//! spaces or tabs), so a model can pretty-print but cannot loop on whitespace. Numbers are
//! bounded too (16 integer digits, 16 fraction digits, 3 exponent digits).

use std::collections::HashMap;
use std::time::Instant;

use super::bounds;
use super::ir::{Expr, Ir, RuleId};
use super::json::{Json, quote};
use super::regex::{self, PatternError};
use super::{CompileLimits, GrammarError};

const SUPPORTED: &str = "type, enum, const, properties, required, additionalProperties, items, \
prefixItems, minItems, maxItems, minLength, maxLength, pattern, format (date, time, date-time, \
uuid, email), minimum/maximum/exclusiveMinimum/exclusiveMaximum (integer), anyOf, oneOf, \
allOf (objects), $ref (local), $defs, definitions";

/// Keywords that do not constrain the text.
const ANNOTATIONS: &[&str] = &[
    "title",
    "description",
    "$schema",
    "$id",
    "$comment",
    "$anchor",
    "default",
    "examples",
    "deprecated",
    "readOnly",
    "writeOnly",
    "contentMediaType",
    "contentEncoding",
    "$defs",
    "definitions",
];

const KEYWORDS: &[&str] = &[
    "type",
    "enum",
    "const",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "minItems",
    "maxItems",
    "minLength",
    "maxLength",
    "anyOf",
    "oneOf",
    "$ref",
    "uniqueItems",
    "pattern",
    "format",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "prefixItems",
    "allOf",
];

const TYPES: &[&str] = &[
    "object", "array", "string", "number", "integer", "boolean", "null",
];

struct Compiler<'a> {
    ir: Ir,
    limits: &'a CompileLimits,
    start: Instant,
    doc: &'a Json,
    refs: HashMap<String, RuleId>,
    prims: HashMap<&'static str, RuleId>,
}

fn unsupported(path: &str, what: &'static str, detail: impl Into<String>) -> GrammarError {
    GrammarError::UnsupportedSchema {
        path: path.to_string(),
        what,
        detail: detail.into(),
        supported: SUPPORTED,
    }
}

fn invalid(path: &str, detail: impl Into<String>) -> GrammarError {
    GrammarError::InvalidSchema {
        path: path.to_string(),
        detail: detail.into(),
    }
}

fn rule_name(path: &str) -> String {
    let mut s: String = path
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    while s.contains("--") {
        s = s.replace("--", "-");
    }
    let s = s.trim_matches('-');
    if s.is_empty() {
        "schema".to_string()
    } else {
        s.to_string()
    }
}

impl Compiler<'_> {
    /// A shared rule for a primitive, defined on first use.
    fn prim(&mut self, name: &'static str) -> Result<Expr, GrammarError> {
        if let Some(&id) = self.prims.get(name) {
            return Ok(Expr::Rule(id));
        }
        let id = self.ir.fresh(name);
        self.prims.insert(name, id);
        let hex = Expr::class(&[('0', '9'), ('a', 'f'), ('A', 'F')], false);
        let digit = Expr::class(&[('0', '9')], false);
        let body = match name {
            "ws" => Expr::opt(Expr::Alt(vec![
                Expr::lit(" "),
                Expr::Seq(vec![
                    Expr::lit("\n"),
                    Expr::repeat(Expr::class(&[(' ', ' '), ('\t', '\t')], false), 0, Some(20)),
                ]),
            ])),
            "char" => Expr::Alt(vec![
                Expr::class(&[('"', '"'), ('\\', '\\'), ('\0', '\u{1f}')], true),
                Expr::Seq(vec![
                    Expr::lit("\\"),
                    Expr::Alt(vec![
                        Expr::class(
                            &[
                                ('"', '"'),
                                ('\\', '\\'),
                                ('/', '/'),
                                ('b', 'b'),
                                ('f', 'f'),
                                ('n', 'n'),
                                ('r', 'r'),
                                ('t', 't'),
                            ],
                            false,
                        ),
                        // \uXXXX outside the surrogates (a lone surrogate is not valid).
                        Expr::Seq(vec![
                            Expr::lit("u"),
                            Expr::Alt(vec![
                                Expr::Seq(vec![
                                    Expr::class(&[('0', '9'), ('a', 'c'), ('A', 'C')], false),
                                    hex.clone(),
                                ]),
                                Expr::Seq(vec![
                                    Expr::class(&[('d', 'd'), ('D', 'D')], false),
                                    Expr::class(&[('0', '7')], false),
                                ]),
                                Expr::Seq(vec![
                                    Expr::class(&[('e', 'f'), ('E', 'F')], false),
                                    hex.clone(),
                                ]),
                            ]),
                            hex.clone(),
                            hex,
                        ]),
                    ]),
                ]),
            ]),
            "string" => {
                let ch = self.prim("char")?;
                Expr::Seq(vec![Expr::lit("\""), Expr::star(ch), Expr::lit("\"")])
            }
            "integer" => Expr::Seq(vec![
                Expr::opt(Expr::lit("-")),
                Expr::Alt(vec![
                    Expr::lit("0"),
                    Expr::Seq(vec![
                        Expr::class(&[('1', '9')], false),
                        Expr::repeat(digit, 0, Some(15)),
                    ]),
                ]),
            ]),
            "number" => {
                let int = self.prim("integer")?;
                Expr::Seq(vec![
                    int,
                    Expr::opt(Expr::Seq(vec![
                        Expr::lit("."),
                        Expr::repeat(digit.clone(), 1, Some(16)),
                    ])),
                    Expr::opt(Expr::Seq(vec![
                        Expr::class(&[('e', 'e'), ('E', 'E')], false),
                        Expr::opt(Expr::class(&[('-', '-'), ('+', '+')], false)),
                        Expr::repeat(digit, 1, Some(3)),
                    ])),
                ])
            }
            "boolean" => Expr::Alt(vec![Expr::lit("true"), Expr::lit("false")]),
            "null" => Expr::lit("null"),
            "value" => Expr::Alt(vec![
                self.prim("object")?,
                self.prim("array")?,
                self.prim("string")?,
                self.prim("number")?,
                self.prim("boolean")?,
                self.prim("null")?,
            ]),
            "object" => {
                let (s, w, v) = (self.prim("string")?, self.prim("ws")?, self.prim("value")?);
                let kv = Expr::Seq(vec![s, w.clone(), Expr::lit(":"), w.clone(), v, w.clone()]);
                Expr::Seq(vec![
                    Expr::lit("{"),
                    w.clone(),
                    Expr::opt(Expr::Seq(vec![
                        kv.clone(),
                        Expr::star(Expr::Seq(vec![Expr::lit(","), w, kv])),
                    ])),
                    Expr::lit("}"),
                ])
            }
            "array" => {
                let (w, v) = (self.prim("ws")?, self.prim("value")?);
                let item = Expr::Seq(vec![v, w.clone()]);
                Expr::Seq(vec![
                    Expr::lit("["),
                    w.clone(),
                    Expr::opt(Expr::Seq(vec![
                        item.clone(),
                        Expr::star(Expr::Seq(vec![Expr::lit(","), w, item])),
                    ])),
                    Expr::lit("]"),
                ])
            }
            _ => Expr::Empty,
        };
        self.ir.define(id, body)?;
        Ok(Expr::Rule(id))
    }

    fn check_time(&self) -> Result<(), GrammarError> {
        if self.start.elapsed() > self.limits.max_time {
            return Err(GrammarError::Timeout {
                limit_ms: self.limits.max_time.as_millis() as u64,
            });
        }
        Ok(())
    }

    fn count(&self, s: &Json, key: &str, path: &str) -> Result<Option<u32>, GrammarError> {
        let Some(v) = s.get(key) else {
            return Ok(None);
        };
        let n = v
            .as_u64()
            .ok_or_else(|| invalid(path, format!("`{key}` must be a non-negative integer")))?;
        if n > self.limits.max_repeat as u64 {
            return Err(GrammarError::TooLarge {
                what: "repetition count",
                limit: self.limits.max_repeat as usize,
            });
        }
        Ok(Some(n as u32))
    }

    /// A rule holding `body`, named after `path`.
    fn rule(&mut self, path: &str, body: Expr) -> Result<Expr, GrammarError> {
        let id = self.ir.fresh(&rule_name(path));
        self.ir.define(id, body)?;
        Ok(Expr::Rule(id))
    }

    fn schema(&mut self, s: &Json, path: &str, depth: usize) -> Result<Expr, GrammarError> {
        self.check_time()?;
        if depth > self.limits.max_schema_depth {
            return Err(GrammarError::TooLarge {
                what: "schema nesting levels",
                limit: self.limits.max_schema_depth,
            });
        }
        let members = match s {
            Json::Bool(true) => return self.prim("value"),
            Json::Bool(false) => {
                return Err(invalid(path, "the schema `false` accepts no value"));
            }
            Json::Object(m) => m,
            _ => return Err(invalid(path, "a schema must be an object or a boolean")),
        };
        for (k, _) in members {
            if !KEYWORDS.contains(&k.as_str()) && !ANNOTATIONS.contains(&k.as_str()) {
                return Err(unsupported(path, "keyword", format!("`{k}`")));
            }
        }
        if s.get("uniqueItems")
            .is_some_and(|v| *v != Json::Bool(false))
        {
            return Err(unsupported(path, "keyword", "`uniqueItems: true`"));
        }
        if let Some(r) = s.get("$ref") {
            if members
                .iter()
                .any(|(k, _)| KEYWORDS.contains(&k.as_str()) && k != "$ref")
            {
                return Err(unsupported(
                    path,
                    "combination",
                    "`$ref` beside other keywords",
                ));
            }
            let r = r
                .as_str()
                .ok_or_else(|| invalid(path, "`$ref` must be a string"))?;
            return self.reference(r, path, depth);
        }
        if let Some(list) = s.get("allOf") {
            let merged = self.merge_all_of(s, list, path)?;
            return self.schema(&merged, path, depth + 1);
        }
        for key in ["anyOf", "oneOf"] {
            if let Some(list) = s.get(key) {
                let others = members
                    .iter()
                    .any(|(k, _)| KEYWORDS.contains(&k.as_str()) && k != key);
                if others {
                    return Err(unsupported(
                        path,
                        "combination",
                        format!("`{key}` beside other keywords"),
                    ));
                }
                let Json::Array(list) = list else {
                    return Err(invalid(path, format!("`{key}` must be an array")));
                };
                if list.is_empty() {
                    return Err(invalid(path, format!("`{key}` is empty")));
                }
                let mut alts = Vec::new();
                for (i, sub) in list.iter().enumerate() {
                    alts.push(self.schema(sub, &format!("{path}/{key}/{i}"), depth + 1)?);
                }
                return Ok(Expr::Alt(alts));
            }
        }
        let types = self.types(s, path)?;
        if let Some(c) = s.get("const") {
            return self.literals(std::slice::from_ref(c), types.as_deref(), path);
        }
        if let Some(e) = s.get("enum") {
            let Json::Array(values) = e else {
                return Err(invalid(path, "`enum` must be an array"));
            };
            return self.literals(values, types.as_deref(), path);
        }
        let types = match types {
            Some(t) => t,
            None => {
                // Infer from the keywords present; nothing at all means any value.
                let has = |k| s.get(k).is_some();
                if has("properties") || has("required") || has("additionalProperties") {
                    vec!["object"]
                } else if has("items") || has("prefixItems") || has("minItems") || has("maxItems") {
                    vec!["array"]
                } else if has("minLength") || has("maxLength") || has("pattern") || has("format") {
                    vec!["string"]
                } else if has("minimum")
                    || has("maximum")
                    || has("exclusiveMinimum")
                    || has("exclusiveMaximum")
                {
                    vec!["number"]
                } else {
                    return self.prim("value");
                }
            }
        };
        let mut alts = Vec::new();
        for t in types {
            alts.push(match t {
                "object" => self.object(s, path, depth)?,
                "array" => self.array(s, path, depth)?,
                "string" => self.string(s, path)?,
                "integer" => self.integer(s, path)?,
                "number" => {
                    if ["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"]
                        .iter()
                        .any(|k| s.get(k).is_some())
                    {
                        return Err(unsupported(
                            path,
                            "keyword",
                            "bounds on `number` (bounds apply to `integer`)",
                        ));
                    }
                    self.prim(t)?
                }
                "boolean" | "null" => self.prim(t)?,
                _ => return Err(invalid(path, format!("unknown type `{t}`"))),
            });
        }
        Ok(if alts.len() == 1 {
            alts.pop().unwrap_or(Expr::Empty)
        } else {
            Expr::Alt(alts)
        })
    }

    fn types(&self, s: &Json, path: &str) -> Result<Option<Vec<&'static str>>, GrammarError> {
        let one = |v: &Json| -> Result<&'static str, GrammarError> {
            let name = v
                .as_str()
                .ok_or_else(|| invalid(path, "`type` must be a string or a list of strings"))?;
            TYPES
                .iter()
                .find(|t| **t == name)
                .copied()
                .ok_or_else(|| invalid(path, format!("unknown type `{name}`")))
        };
        match s.get("type") {
            None => Ok(None),
            Some(Json::Array(list)) => {
                if list.is_empty() {
                    return Err(invalid(path, "`type` is an empty list"));
                }
                list.iter()
                    .map(one)
                    .collect::<Result<Vec<_>, _>>()
                    .map(Some)
            }
            Some(v) => Ok(Some(vec![one(v)?])),
        }
    }

    /// `enum` / `const`: the values (of an allowed type) written compactly.
    fn literals(
        &mut self,
        values: &[Json],
        types: Option<&[&str]>,
        path: &str,
    ) -> Result<Expr, GrammarError> {
        let allowed = |v: &Json| {
            types.is_none_or(|ts| {
                ts.contains(&v.type_name())
                    || (v.type_name() == "integer" && ts.contains(&"number"))
            })
        };
        let alts: Vec<Expr> = values
            .iter()
            .filter(|v| allowed(v))
            .map(|v| Expr::lit(&v.to_compact()))
            .collect();
        if alts.is_empty() {
            return Err(invalid(path, "no `enum`/`const` value has an allowed type"));
        }
        self.rule(path, Expr::Alt(alts))
    }

    fn string(&mut self, s: &Json, path: &str) -> Result<Expr, GrammarError> {
        let min = self.count(s, "minLength", path)?;
        let max = self.count(s, "maxLength", path)?;
        let format = match s.get("format") {
            None => None,
            Some(f) => {
                let f = f
                    .as_str()
                    .ok_or_else(|| invalid(path, "`format` must be a string"))?;
                // Other formats are annotations (the specification's default).
                regex::format_pattern(f)
            }
        };
        let pattern = match s.get("pattern") {
            None => None,
            Some(p) => Some(
                p.as_str()
                    .ok_or_else(|| invalid(path, "`pattern` must be a string"))?,
            ),
        };
        if let Some(p) = pattern.or(format) {
            if pattern.is_some() && format.is_some() {
                return Err(unsupported(path, "combination", "`pattern` with `format`"));
            }
            if min.is_some() || max.is_some() {
                return Err(unsupported(
                    path,
                    "combination",
                    "`pattern` or `format` with `minLength`/`maxLength`",
                ));
            }
            let body = regex::pattern(p, self.limits.max_repeat).map_err(|e| match e {
                PatternError::Syntax(m) => invalid(path, format!("`pattern` {p:?}: {m}")),
                PatternError::Unsupported(what) => {
                    unsupported(path, "pattern", format!("{p:?} uses {what}"))
                }
            })?;
            return self.rule(
                path,
                Expr::Seq(vec![Expr::lit("\""), body, Expr::lit("\"")]),
            );
        }
        if min.is_none() && max.is_none() {
            return self.prim("string");
        }
        let ch = self.prim("char")?;
        let min = min.unwrap_or(0);
        if max.is_some_and(|m| m < min) {
            return Err(invalid(path, "`maxLength` is below `minLength`"));
        }
        self.rule(
            path,
            Expr::Seq(vec![
                Expr::lit("\""),
                Expr::repeat(ch, min, max),
                Expr::lit("\""),
            ]),
        )
    }

    fn array(&mut self, s: &Json, path: &str, depth: usize) -> Result<Expr, GrammarError> {
        if let Some(prefix) = s.get("prefixItems") {
            return self.tuple(s, prefix, path, depth);
        }
        let item = match s.get("items") {
            Some(items @ (Json::Object(_) | Json::Bool(_))) => {
                self.schema(items, &format!("{path}/items"), depth + 1)?
            }
            Some(_) => {
                return Err(unsupported(
                    path,
                    "keyword",
                    "`items` as a list (tuple validation)",
                ));
            }
            None => self.prim("value")?,
        };
        let min = self.count(s, "minItems", path)?.unwrap_or(0);
        let max = self.count(s, "maxItems", path)?;
        if max.is_some_and(|m| m < min) {
            return Err(invalid(path, "`maxItems` is below `minItems`"));
        }
        let w = self.prim("ws")?;
        let item = Expr::Seq(vec![item, w.clone()]);
        let body = if max == Some(0) {
            Expr::Empty
        } else {
            let more = Expr::repeat(
                Expr::Seq(vec![Expr::lit(","), w.clone(), item.clone()]),
                min.saturating_sub(1),
                max.map(|m| m - 1),
            );
            let list = Expr::Seq(vec![item, more]);
            if min == 0 { Expr::opt(list) } else { list }
        };
        self.rule(
            path,
            Expr::Seq(vec![Expr::lit("["), w, body, Expr::lit("]")]),
        )
    }

    /// The integers within the schema's bounds.
    fn integer(&mut self, s: &Json, path: &str) -> Result<Expr, GrammarError> {
        let num = |k: &str| -> Result<Option<f64>, GrammarError> {
            match s.get(k) {
                None => Ok(None),
                Some(Json::Number(n)) => Ok(n.as_f64()),
                Some(_) => Err(invalid(path, format!("`{k}` must be a number"))),
            }
        };
        let mut lo: Option<f64> = num("minimum")?.map(f64::ceil);
        if let Some(x) = num("exclusiveMinimum")? {
            let v = x.floor() + 1.0;
            lo = Some(lo.map_or(v, |l| l.max(v)));
        }
        let mut hi: Option<f64> = num("maximum")?.map(f64::floor);
        if let Some(x) = num("exclusiveMaximum")? {
            let v = x.ceil() - 1.0;
            hi = Some(hi.map_or(v, |h| h.min(v)));
        }
        if lo.is_none() && hi.is_none() {
            return self.prim("integer");
        }
        let clamp = |v: f64| v.clamp(-(bounds::MAX_ABS as f64), bounds::MAX_ABS as f64) as i128;
        let body = bounds::integers(lo.map(clamp), hi.map(clamp))
            .ok_or_else(|| invalid(path, "the integer bounds admit no value"))?;
        self.rule(path, body)
    }

    /// `prefixItems`: the listed schemas in order, then `items` (a schema, or `false`
    /// for none) for the rest, within `minItems`/`maxItems`.
    fn tuple(
        &mut self,
        s: &Json,
        prefix: &Json,
        path: &str,
        depth: usize,
    ) -> Result<Expr, GrammarError> {
        let Json::Array(prefix) = prefix else {
            return Err(invalid(path, "`prefixItems` must be an array"));
        };
        let mut items = Vec::with_capacity(prefix.len());
        for (i, sub) in prefix.iter().enumerate() {
            items.push(self.schema(sub, &format!("{path}/prefixItems/{i}"), depth + 1)?);
        }
        let rest = match s.get("items") {
            None | Some(Json::Bool(true)) => Some(self.prim("value")?),
            Some(Json::Bool(false)) => None,
            Some(sub @ Json::Object(_)) => {
                Some(self.schema(sub, &format!("{path}/items"), depth + 1)?)
            }
            Some(_) => return Err(invalid(path, "`items` must be a schema or a boolean")),
        };
        let n = items.len() as u32;
        let min = self.count(s, "minItems", path)?.unwrap_or(0);
        let max = self.count(s, "maxItems", path)?;
        if max.is_some_and(|m| m < min) {
            return Err(invalid(path, "`maxItems` is below `minItems`"));
        }
        let w = self.prim("ws")?;
        // After item k (1-based) has been written: the next prefix item, the rest, or the end.
        // tail[k] = end, or `,` item[k] tail[k+1]; required while k < min.
        let extra_min = min.saturating_sub(n);
        let extra_max = match (max, &rest) {
            (_, None) => Some(0),
            (Some(m), Some(_)) => Some(m.saturating_sub(n)),
            (None, Some(_)) => None,
        };
        if rest.is_none() && min > n {
            return Err(invalid(
                path,
                "`minItems` exceeds `prefixItems` with `items: false`",
            ));
        }
        let comma = |e: Expr| Expr::Seq(vec![Expr::lit(","), w.clone(), e, w.clone()]);
        let mut tail = match &rest {
            Some(r) if extra_max != Some(0) => Expr::repeat(comma(r.clone()), extra_min, extra_max),
            _ => Expr::Empty,
        };
        let limit = max.unwrap_or(u32::MAX).min(n);
        for k in (1..limit).rev() {
            let item = items[k as usize].clone();
            let next = Expr::Seq(vec![comma(item), tail]);
            tail = if k >= min { Expr::opt(next) } else { next };
            tail = self.rule(&format!("{path}/tail{k}"), tail)?;
        }
        let body = if limit == 0 {
            // No prefix item fits (`maxItems: 0`), or the prefix is empty.
            match (&rest, limit, n) {
                (Some(r), _, 0) if extra_max != Some(0) => {
                    let more = Expr::repeat(
                        comma(r.clone()),
                        extra_min.saturating_sub(1),
                        extra_max.map(|m| m - 1),
                    );
                    let list = Expr::Seq(vec![r.clone(), w.clone(), more]);
                    if extra_min == 0 {
                        Expr::opt(list)
                    } else {
                        list
                    }
                }
                _ => Expr::Empty,
            }
        } else {
            let first = Expr::Seq(vec![items[0].clone(), w.clone(), tail]);
            if min == 0 { Expr::opt(first) } else { first }
        };
        self.rule(
            path,
            Expr::Seq(vec![Expr::lit("["), w, body, Expr::lit("]")]),
        )
    }

    /// `allOf` of object schemas (each possibly a `$ref`), merged into one: the union of
    /// their properties and required lists, with the schema's own keywords beside.
    fn merge_all_of(&self, s: &Json, list: &Json, path: &str) -> Result<Json, GrammarError> {
        let Json::Array(list) = list else {
            return Err(invalid(path, "`allOf` must be an array"));
        };
        let mut props: Vec<(String, Json)> = Vec::new();
        let mut required: Vec<Json> = Vec::new();
        let mut extra: Option<Json> = None;
        let mut parts: Vec<&Json> = list.iter().collect();
        let own;
        if let Json::Object(m) = s {
            own = Json::Object(m.iter().filter(|(k, _)| k != "allOf").cloned().collect());
            parts.push(&own);
        }
        for (i, mut part) in parts.into_iter().enumerate() {
            let mut hops = 0;
            while let Some(r) = part.get("$ref") {
                hops += 1;
                if hops > 32 {
                    return Err(invalid(path, "`$ref` chain too long in `allOf`"));
                }
                let r = r
                    .as_str()
                    .ok_or_else(|| invalid(path, "`$ref` must be a string"))?;
                part = self.resolve(r, path)?;
            }
            let Json::Object(m) = part else {
                return Err(unsupported(
                    path,
                    "combination",
                    format!("`allOf/{i}` is not an object schema"),
                ));
            };
            for (k, v) in m {
                match k.as_str() {
                    "properties" => {
                        let Json::Object(ps) = v else {
                            return Err(invalid(path, "`properties` must be an object"));
                        };
                        for (pk, pv) in ps {
                            if props.iter().any(|(k2, _)| k2 == pk) {
                                return Err(unsupported(
                                    path,
                                    "combination",
                                    format!("`allOf` parts that both define property `{pk}`"),
                                ));
                            }
                            props.push((pk.clone(), pv.clone()));
                        }
                    }
                    "required" => {
                        if let Json::Array(r) = v {
                            required.extend(r.iter().cloned());
                        }
                    }
                    "additionalProperties" => extra = Some(v.clone()),
                    "type" if v.as_str() == Some("object") => {}
                    k if ANNOTATIONS.contains(&k) => {}
                    other => {
                        return Err(unsupported(
                            path,
                            "combination",
                            format!("`allOf` part with `{other}` (only object schemas merge)"),
                        ));
                    }
                }
            }
        }
        let mut out = vec![
            ("type".to_string(), Json::String("object".into())),
            ("properties".to_string(), Json::Object(props)),
            ("required".to_string(), Json::Array(required)),
        ];
        if let Some(e) = extra {
            out.push(("additionalProperties".to_string(), e));
        }
        Ok(Json::Object(out))
    }

    /// The schema a local `$ref` points at.
    fn resolve(&self, r: &str, path: &str) -> Result<&Json, GrammarError> {
        let Some(pointer) = r.strip_prefix('#') else {
            return Err(unsupported(
                path,
                "reference",
                format!("`{r}` (only local `#…` references)"),
            ));
        };
        let mut target = self.doc;
        for part in pointer.split('/').skip(1) {
            let part = part.replace("~1", "/").replace("~0", "~");
            target = match target {
                Json::Object(_) => target.get(&part),
                Json::Array(items) => part.parse::<usize>().ok().and_then(|i| items.get(i)),
                _ => None,
            }
            .ok_or_else(|| invalid(path, format!("`$ref` `{r}` points nowhere")))?;
        }
        Ok(target)
    }

    fn object(&mut self, s: &Json, path: &str, depth: usize) -> Result<Expr, GrammarError> {
        let mut props: Vec<(String, Json)> = match s.get("properties") {
            None => Vec::new(),
            Some(Json::Object(m)) => m.clone(),
            Some(_) => return Err(invalid(path, "`properties` must be an object")),
        };
        let required: Vec<String> = match s.get("required") {
            None => Vec::new(),
            Some(Json::Array(list)) => list
                .iter()
                .map(|v| {
                    v.as_str()
                        .map(str::to_string)
                        .ok_or_else(|| invalid(path, "`required` must list strings"))
                })
                .collect::<Result<_, _>>()?,
            Some(_) => return Err(invalid(path, "`required` must be an array")),
        };
        for r in &required {
            if !props.iter().any(|(k, _)| k == r) {
                props.push((r.clone(), Json::Bool(true)));
            }
        }
        let extra = match s.get("additionalProperties") {
            None | Some(Json::Bool(false)) => None,
            Some(v @ (Json::Bool(true) | Json::Object(_))) => {
                Some(self.schema(v, &format!("{path}/additionalProperties"), depth + 1)?)
            }
            Some(_) => {
                return Err(invalid(
                    path,
                    "`additionalProperties` must be a boolean or a schema",
                ));
            }
        };
        let w = self.prim("ws")?;
        let mut kvs = Vec::with_capacity(props.len());
        for (k, sub) in &props {
            let v = self.schema(sub, &format!("{path}/properties/{k}"), depth + 1)?;
            kvs.push((
                required.contains(k),
                Expr::Seq(vec![
                    Expr::lit(&quote(k)),
                    w.clone(),
                    Expr::lit(":"),
                    w.clone(),
                    v,
                    w.clone(),
                ]),
            ));
        }
        let extra_kv = match extra {
            Some(v) => {
                let key = self.prim("string")?;
                Some(Expr::Seq(vec![
                    key,
                    w.clone(),
                    Expr::lit(":"),
                    w.clone(),
                    v,
                    w.clone(),
                ]))
            }
            None => None,
        };
        // first[i]: members i.. with none written yet; rest[i]: members i.. after one
        // has been written (each then preceded by a comma). Optional members may be
        // skipped; the order is the schema's.
        let comma = |e: Expr| Expr::Seq(vec![Expr::lit(","), w.clone(), e]);
        let (tail_rest, tail_first) = match &extra_kv {
            Some(kv) => (
                Expr::star(comma(kv.clone())),
                Expr::opt(Expr::Seq(vec![kv.clone(), Expr::star(comma(kv.clone()))])),
            ),
            None => (Expr::Empty, Expr::Empty),
        };
        let mut rest_next = self.rule(&format!("{path}/rest"), tail_rest)?;
        let mut first_next = self.rule(&format!("{path}/first"), tail_first)?;
        for (i, (req, kv)) in kvs.iter().enumerate().rev() {
            self.check_time()?;
            let take_first = Expr::Seq(vec![kv.clone(), rest_next.clone()]);
            let take_rest = comma(Expr::Seq(vec![kv.clone(), rest_next.clone()]));
            let (first, rest) = if *req {
                (take_first, take_rest)
            } else {
                (
                    Expr::Alt(vec![take_first, first_next]),
                    Expr::Alt(vec![take_rest, rest_next]),
                )
            };
            // Each piece is a rule, so the automaton shares it instead of copying.
            first_next = self.rule(&format!("{path}/first{i}"), first)?;
            rest_next = self.rule(&format!("{path}/rest{i}"), rest)?;
        }
        self.rule(
            path,
            Expr::Seq(vec![Expr::lit("{"), w, first_next, Expr::lit("}")]),
        )
    }

    fn reference(&mut self, r: &str, path: &str, depth: usize) -> Result<Expr, GrammarError> {
        if let Some(&id) = self.refs.get(r) {
            return Ok(Expr::Rule(id));
        }
        let Some(pointer) = r.strip_prefix('#') else {
            return Err(unsupported(
                path,
                "reference",
                format!("`{r}` (only local `#…` references)"),
            ));
        };
        let mut target = self.doc;
        for part in pointer.split('/').skip(1) {
            let part = part.replace("~1", "/").replace("~0", "~");
            target = match target {
                Json::Object(_) => target.get(&part),
                Json::Array(items) => part.parse::<usize>().ok().and_then(|i| items.get(i)),
                _ => None,
            }
            .ok_or_else(|| invalid(path, format!("`$ref` `{r}` points nowhere")))?;
        }
        let id = self.ir.fresh(&rule_name(&format!("ref{pointer}")));
        self.refs.insert(r.to_string(), id);
        let body = self.schema(target, r, depth + 1)?;
        self.ir.define(id, body)?;
        Ok(Expr::Rule(id))
    }
}

/// Compiles schema text to rules rooted at `root`.
pub(crate) fn compile(src: &str, limits: &CompileLimits) -> Result<Ir, GrammarError> {
    let doc: Json =
        serde_json::from_str(src).map_err(|e| GrammarError::SchemaJson(e.to_string()))?;
    let mut c = Compiler {
        ir: Ir::default(),
        limits,
        start: Instant::now(),
        doc: &doc,
        refs: HashMap::new(),
        prims: HashMap::new(),
    };
    let root = c.ir.rule("root");
    c.ir.root = root;
    let body = c.schema(&doc, "#", 0)?;
    let ws = c.prim("ws")?;
    c.ir.define(root, Expr::Seq(vec![body, ws]))?;
    Ok(c.ir)
}
