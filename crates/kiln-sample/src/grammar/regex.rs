//! JSON-schema `pattern` (and the `format`s written as patterns) → the grammar IR, through
//! `regex-syntax`'s high-level form. The pattern must match the whole string, as
//! llama.cpp's converter reads it (`^` and `$` at the ends are accepted and change
//! nothing). Characters a JSON string must escape (`"`, `\`, controls) are left out of
//! classes and `.`, and written escaped when the pattern names them literally.

use regex_syntax::hir::{Class, Hir, HirKind, Look};

use super::ir::Expr;

/// Why a pattern cannot be used.
pub(crate) enum PatternError {
    Syntax(String),
    Unsupported(&'static str),
}

/// The characters a JSON string may hold unescaped.
fn json_safe(ranges: &[(u32, u32)]) -> Vec<(u32, u32)> {
    let banned = [(0u32, 0x1Fu32), (0x22, 0x22), (0x5C, 0x5C)];
    let mut out = Vec::new();
    for &(lo, hi) in ranges {
        let mut pieces = vec![(lo, hi)];
        for &(blo, bhi) in &banned {
            pieces = pieces
                .into_iter()
                .flat_map(|(a, b)| {
                    let mut v = Vec::new();
                    if b < blo || a > bhi {
                        v.push((a, b));
                    } else {
                        if a < blo {
                            v.push((a, blo - 1));
                        }
                        if b > bhi {
                            v.push((bhi + 1, b));
                        }
                    }
                    v
                })
                .collect();
        }
        out.extend(pieces);
    }
    out
}

/// One literal character as it appears inside a JSON string.
fn json_char(c: char) -> String {
    let quoted = serde_json::to_string(&c.to_string()).unwrap_or_default();
    quoted[1..quoted.len() - 1].to_string()
}

fn convert(h: &Hir, max_repeat: u32) -> Result<Expr, PatternError> {
    Ok(match h.kind() {
        HirKind::Empty => Expr::Empty,
        HirKind::Literal(lit) => {
            let s = std::str::from_utf8(&lit.0)
                .map_err(|_| PatternError::Unsupported("a literal that is not UTF-8"))?;
            Expr::lit(&s.chars().map(json_char).collect::<String>())
        }
        HirKind::Class(Class::Unicode(c)) => {
            let ranges: Vec<(u32, u32)> = c
                .iter()
                .map(|r| (r.start() as u32, r.end() as u32))
                .collect();
            Expr::Class {
                ranges: json_safe(&ranges),
                negated: false,
            }
        }
        HirKind::Class(Class::Bytes(c)) => {
            if c.iter().any(|r| r.end() > 0x7F) {
                return Err(PatternError::Unsupported("a byte class beyond ASCII"));
            }
            let ranges: Vec<(u32, u32)> = c
                .iter()
                .map(|r| (r.start() as u32, r.end() as u32))
                .collect();
            Expr::Class {
                ranges: json_safe(&ranges),
                negated: false,
            }
        }
        HirKind::Look(Look::Start | Look::End | Look::StartLF | Look::EndLF) => Expr::Empty,
        HirKind::Look(_) => {
            return Err(PatternError::Unsupported(
                "word boundaries and other look-arounds",
            ));
        }
        HirKind::Repetition(r) => {
            if r.min > max_repeat || r.max.is_some_and(|m| m > max_repeat) {
                return Err(PatternError::Unsupported(
                    "a repetition count over the limit",
                ));
            }
            Expr::repeat(convert(&r.sub, max_repeat)?, r.min, r.max)
        }
        HirKind::Capture(c) => convert(&c.sub, max_repeat)?,
        HirKind::Concat(items) => Expr::Seq(
            items
                .iter()
                .map(|i| convert(i, max_repeat))
                .collect::<Result<_, _>>()?,
        ),
        HirKind::Alternation(items) => Expr::Alt(
            items
                .iter()
                .map(|i| convert(i, max_repeat))
                .collect::<Result<_, _>>()?,
        ),
    })
}

/// The characters of a string matching `pattern` (without the quotes).
pub(crate) fn pattern(pattern: &str, max_repeat: u32) -> Result<Expr, PatternError> {
    let hir = regex_syntax::ParserBuilder::new()
        .utf8(true)
        .build()
        .parse(pattern)
        .map_err(|e| PatternError::Syntax(e.to_string()))?;
    convert(&hir, max_repeat)
}

/// `format` values written as patterns (RFC 3339 dates and times, RFC 4122 UUIDs, a
/// practical e-mail address).
pub(crate) fn format_pattern(format: &str) -> Option<&'static str> {
    const DATE: &str = r"[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])";
    const TIME: &str = r"([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]{1,9})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])";
    Some(match format {
        "date" => DATE,
        "time" => TIME,
        "date-time" => concat!(
            r"[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])",
            "T",
            r"([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]{1,9})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])"
        ),
        "uuid" => r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}",
        "email" => {
            r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*@[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)+"
        }
        _ => return None,
    })
}
