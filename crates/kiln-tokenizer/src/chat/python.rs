//! Python's rendering of values where chat templates see it: `json.dumps` (the `tojson`
//! filter Hugging Face installs: `ensure_ascii=False`, `", "`/`": "` separators, keys in
//! insertion order), `str()` of `None`/`True`/lists/dicts when a template prints them, and
//! `repr()` of floats. Jinja2 renders through Python, so a template printing `true` must
//! write `True` here as well.

use std::fmt::Write;

use minijinja::value::{Kwargs, ValueKind};
use minijinja::{Error, ErrorKind, Value};

/// `repr(float)`: shortest round-trip digits, scientific below 1e-4 and from 1e16.
pub(crate) fn float_repr(x: f64) -> String {
    if x.is_nan() {
        return "nan".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf".into() } else { "-inf".into() };
    }
    if x == 0.0 {
        return if x.is_sign_negative() {
            "-0.0".into()
        } else {
            "0.0".into()
        };
    }
    // `{:e}` gives the shortest digits that round-trip: "d.ddde±x".
    let sci = format!("{x:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let negative = mantissa.starts_with('-');
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let sign = if negative { "-" } else { "" };
    if (-4..16).contains(&exp) {
        let point = exp + 1; // digits before the decimal point
        let mut s = String::from(sign);
        if point <= 0 {
            s.push_str("0.");
            s.extend(std::iter::repeat_n('0', point.unsigned_abs() as usize));
            s.push_str(&digits);
        } else {
            let p = point as usize;
            if digits.len() <= p {
                s.push_str(&digits);
                s.extend(std::iter::repeat_n('0', p - digits.len()));
                s.push_str(".0");
            } else {
                s.push_str(&digits[..p]);
                s.push('.');
                s.push_str(&digits[p..]);
            }
        }
        s
    } else {
        let mut s = String::from(sign);
        s.push_str(&digits[..1]);
        if digits.len() > 1 {
            s.push('.');
            s.push_str(&digits[1..]);
        }
        let _ = write!(
            s,
            "e{}{:02}",
            if exp < 0 { '-' } else { '+' },
            exp.unsigned_abs()
        );
        s
    }
}

fn number(v: &Value, out: &mut String) {
    if v.is_integer() {
        let _ = write!(out, "{v}");
    } else {
        out.push_str(&float_repr(f64::try_from(v.clone()).unwrap_or(f64::NAN)));
    }
}

/// `str(value)` for what a template prints.
pub(crate) fn str_of(v: &Value, out: &mut String) {
    match v.kind() {
        ValueKind::Undefined => {}
        ValueKind::String => out.push_str(v.as_str().unwrap_or_default()),
        _ => repr(v, out),
    }
}

/// `repr(value)`: strings quoted the way Python picks its quote.
fn repr(v: &Value, out: &mut String) {
    match v.kind() {
        ValueKind::Undefined | ValueKind::None => out.push_str("None"),
        ValueKind::Bool => out.push_str(if v.is_true() { "True" } else { "False" }),
        ValueKind::Number => number(v, out),
        ValueKind::String => py_str_repr(v.as_str().unwrap_or_default(), out),
        ValueKind::Seq | ValueKind::Iterable => {
            out.push('[');
            if let Ok(items) = v.try_iter() {
                for (i, item) in items.enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    repr(&item, out);
                }
            }
            out.push(']');
        }
        ValueKind::Map => {
            out.push('{');
            if let Ok(keys) = v.try_iter() {
                for (i, k) in keys.enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    repr(&k, out);
                    out.push_str(": ");
                    repr(&v.get_item(&k).unwrap_or_default(), out);
                }
            }
            out.push('}');
        }
        _ => {
            let _ = write!(out, "{v}");
        }
    }
}

fn py_str_repr(s: &str, out: &mut String) {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push(quote);
}

/// The options of `json.dumps` the `tojson` filter takes.
struct JsonStyle {
    ensure_ascii: bool,
    indent: Option<String>,
    item_sep: String,
    key_sep: String,
    sort_keys: bool,
}

/// The `tojson` filter: `json.dumps(value, ensure_ascii=False, indent=None,
/// separators=None, sort_keys=False)`, positional or keyword.
pub(crate) fn tojson(value: Value, args: &[Value], kwargs: Kwargs) -> Result<Value, Error> {
    let arg = |i: usize, name: &str| -> Result<Option<Value>, Error> {
        let kw: Option<Value> = kwargs.get(name)?;
        Ok(kw.or_else(|| args.get(i).cloned()).filter(|v| !v.is_none()))
    };
    let ensure_ascii = arg(0, "ensure_ascii")?.is_some_and(|v| v.is_true());
    let indent = match arg(1, "indent")? {
        None => None,
        Some(v) if v.kind() == ValueKind::String => Some(v.as_str().unwrap_or_default().to_owned()),
        Some(v) => {
            let n = v.as_i64().ok_or_else(|| {
                Error::new(
                    ErrorKind::InvalidOperation,
                    "tojson: indent must be an integer or a string",
                )
            })?;
            Some(" ".repeat(usize::try_from(n.max(0)).unwrap_or(0)))
        }
    };
    let (item_sep, key_sep) = match arg(2, "separators")? {
        Some(v) => {
            let a = v
                .get_item_by_index(0)
                .ok()
                .and_then(|x| x.as_str().map(str::to_owned));
            let b = v
                .get_item_by_index(1)
                .ok()
                .and_then(|x| x.as_str().map(str::to_owned));
            match (a, b) {
                (Some(a), Some(b)) => (a, b),
                _ => {
                    return Err(Error::new(
                        ErrorKind::InvalidOperation,
                        "tojson: separators must be two strings",
                    ));
                }
            }
        }
        None if indent.is_some() => (",".into(), ": ".into()),
        None => (", ".into(), ": ".into()),
    };
    let sort_keys = arg(3, "sort_keys")?.is_some_and(|v| v.is_true());
    kwargs.assert_all_used()?;
    let style = JsonStyle {
        ensure_ascii,
        indent,
        item_sep,
        key_sep,
        sort_keys,
    };
    let mut out = String::new();
    dump(&value, &style, 0, &mut out)?;
    Ok(Value::from(out))
}

fn newline(style: &JsonStyle, level: usize, out: &mut String) {
    if let Some(ind) = &style.indent {
        out.push('\n');
        for _ in 0..level {
            out.push_str(ind);
        }
    }
}

fn dump(v: &Value, style: &JsonStyle, level: usize, out: &mut String) -> Result<(), Error> {
    match v.kind() {
        ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
        ValueKind::Number => {
            if v.is_integer() {
                let _ = write!(out, "{v}");
            } else {
                let x = f64::try_from(v.clone()).unwrap_or(f64::NAN);
                out.push_str(&if x.is_nan() {
                    "NaN".to_owned()
                } else if x.is_infinite() {
                    if x > 0.0 {
                        "Infinity".into()
                    } else {
                        "-Infinity".into()
                    }
                } else {
                    float_repr(x)
                });
            }
        }
        ValueKind::String => json_str(v.as_str().unwrap_or_default(), style.ensure_ascii, out),
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = v.try_iter()?.collect();
            if items.is_empty() {
                out.push_str("[]");
                return Ok(());
            }
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(&style.item_sep);
                }
                newline(style, level + 1, out);
                dump(item, style, level + 1, out)?;
            }
            newline(style, level, out);
            out.push(']');
        }
        ValueKind::Map => {
            let mut keys: Vec<Value> = v.try_iter()?.collect();
            if keys.is_empty() {
                out.push_str("{}");
                return Ok(());
            }
            if style.sort_keys {
                keys.sort();
            }
            out.push('{');
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push_str(&style.item_sep);
                }
                newline(style, level + 1, out);
                match k.kind() {
                    ValueKind::String => {
                        json_str(k.as_str().unwrap_or_default(), style.ensure_ascii, out)
                    }
                    _ => {
                        let mut s = String::new();
                        dump(k, style, level + 1, &mut s)?;
                        json_str(&s, style.ensure_ascii, out);
                    }
                }
                out.push_str(&style.key_sep);
                dump(&v.get_item(k)?, style, level + 1, out)?;
            }
            newline(style, level, out);
            out.push('}');
        }
        ValueKind::Undefined => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                "Object of type Undefined is not JSON serializable",
            ));
        }
        other => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                format!("Object of type {other} is not JSON serializable"),
            ));
        }
    }
    Ok(())
}

fn json_str(s: &str, ensure_ascii: bool, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c if ensure_ascii && !c.is_ascii() => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_print_as_python_repr() {
        for (x, want) in [
            (1.0, "1.0"),
            (0.1, "0.1"),
            (1e-5, "1e-05"),
            (0.0001, "0.0001"),
            (1e16, "1e+16"),
            (1234567890123456.0, "1234567890123456.0"),
            (-2.5, "-2.5"),
            (1.5e-7, "1.5e-07"),
            (2.71875, "2.71875"),
        ] {
            assert_eq!(float_repr(x), want, "{x}");
        }
    }

    #[test]
    fn strings_repr_with_pythons_choice_of_quote() {
        let mut s = String::new();
        py_str_repr("it's", &mut s);
        assert_eq!(s, "\"it's\"");
        s.clear();
        py_str_repr("a\nb", &mut s);
        assert_eq!(s, "'a\\nb'");
    }
}
