//! `kiln inspect`: a readable dump of a GGUF file — header, whether Kiln runs its
//! architecture, its experts (count, active, shared) for a mixture of experts, the weight
//! bytes a token reads, metadata, tensor table and per-type totals. Long strings and arrays
//! are abbreviated unless `full` is set.

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::path::Path;
use std::sync::Arc;

use kiln_format::{Array, FormatError, GgmlType, GgufFile, Value};

/// Array elements shown before `…` when not `full`.
const SHOWN_ELEMS: usize = 5;
/// Characters of a string shown before `…` when not `full`.
const SHOWN_CHARS: usize = 80;

/// Opens the GGUF file at `path` and prints its report to `out`.
pub fn run(path: &Path, full: bool, out: &mut dyn Write) -> Result<(), FormatError> {
    let file = Arc::new(GgufFile::open(path)?);
    print(&file, &path.display().to_string(), full, out)
}

/// Prints the report for an already opened file; `name` is shown as the file name.
pub fn print(
    file: &Arc<GgufFile>,
    name: &str,
    full: bool,
    out: &mut dyn Write,
) -> Result<(), FormatError> {
    report(file, name, full, out).map_err(|source| FormatError::Write { source })
}

fn report(file: &Arc<GgufFile>, name: &str, full: bool, out: &mut dyn Write) -> io::Result<()> {
    let tensors = file.tensors();
    writeln!(out, "file:         {name}")?;
    writeln!(
        out,
        "size:         {} bytes ({})",
        file.file_size(),
        human_bytes(file.file_size())
    )?;
    writeln!(out, "version:      {}", file.version())?;
    writeln!(out, "alignment:    {}", file.alignment())?;
    writeln!(out, "tensors:      {}", tensors.len())?;
    writeln!(out, "data offset:  {}", file.data_offset())?;
    writeln!(out, "architecture: {}", architecture(file))?;
    // Binding the tensors maps them and checks their shapes; nothing is read or copied.
    if let Ok(model) = kiln_model::Model::from_gguf(Arc::clone(file)) {
        if let Some(e) = model.experts() {
            writeln!(
                out,
                "experts:      {} per layer, {} active, {} shared ({} of {} layers; expert FFN {})",
                e.n_expert,
                e.n_expert_used,
                e.n_shared,
                e.moe_layers,
                model.config().n_layer,
                e.n_ff_exp
            )?;
        }
        let (per_token, all) = (model.weight_bytes_per_token(), model.weight_bytes());
        writeln!(
            out,
            "per token:    {per_token} weight bytes read ({}, {:.1}% of {})",
            human_bytes(per_token),
            100.0 * per_token as f64 / all.max(1) as f64,
            human_bytes(all)
        )?;
    }

    let md = file.metadata();
    writeln!(out)?;
    writeln!(out, "metadata ({} entries):", md.len())?;
    let key_w = md.iter().map(|(k, _)| k.chars().count()).max().unwrap_or(0);
    for (key, value) in md.iter() {
        let ty = match value {
            Value::Array(_) => "array",
            v => v.type_name(),
        };
        writeln!(out, "  {key:<key_w$}  {ty:<6}  {}", fmt_value(value, full))?;
    }

    writeln!(out)?;
    writeln!(out, "tensors ({}):", tensors.len())?;
    let shapes: Vec<String> = tensors.iter().map(|t| fmt_shape(&t.dims)).collect();
    let name_w = tensors
        .iter()
        .map(|t| t.name.chars().count())
        .max()
        .unwrap_or(0)
        .max(4);
    let shape_w = shapes
        .iter()
        .map(|s| s.chars().count())
        .max()
        .unwrap_or(0)
        .max(5);
    let bytes_w = tensors
        .iter()
        .map(|t| t.n_bytes.to_string().len())
        .max()
        .unwrap_or(0)
        .max(5);
    writeln!(
        out,
        "  {:<name_w$}  {:<7}  {:<shape_w$}  {:>bytes_w$}",
        "name", "type", "shape", "bytes"
    )?;
    for (t, shape) in tensors.iter().zip(&shapes) {
        writeln!(
            out,
            "  {:<name_w$}  {:<7}  {shape:<shape_w$}  {:>bytes_w$}",
            t.name,
            t.ty.name(),
            t.n_bytes
        )?;
    }

    #[derive(Default)]
    struct Total {
        tensors: u64,
        elements: u64,
        bytes: u64,
    }
    let mut by_type: BTreeMap<GgmlType, Total> = BTreeMap::new();
    for t in tensors {
        let e = by_type.entry(t.ty).or_default();
        e.tensors += 1;
        e.elements = e.elements.saturating_add(t.n_elements());
        e.bytes = e.bytes.saturating_add(t.n_bytes);
    }
    writeln!(out)?;
    writeln!(out, "totals by type:")?;
    writeln!(
        out,
        "  {:<7}  {:>7}  {:>13}  {:>13}",
        "type", "tensors", "elements", "bytes"
    )?;
    let mut all = Total::default();
    for (ty, t) in &by_type {
        writeln!(
            out,
            "  {:<7}  {:>7}  {:>13}  {:>13}  ({})",
            ty.name(),
            t.tensors,
            t.elements,
            t.bytes,
            human_bytes(t.bytes)
        )?;
        all.tensors += t.tensors;
        all.elements = all.elements.saturating_add(t.elements);
        all.bytes = all.bytes.saturating_add(t.bytes);
    }
    writeln!(
        out,
        "  {:<7}  {:>7}  {:>13}  {:>13}  ({})",
        "total",
        all.tensors,
        all.elements,
        all.bytes,
        human_bytes(all.bytes)
    )?;
    Ok(())
}

fn fmt_shape(dims: &[u64]) -> String {
    dims.iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(" × ")
}

fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut x = n as f64;
    let mut unit = 0;
    while x >= 1024.0 && unit + 1 < UNITS.len() {
        x /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{x:.1} {}", UNITS[unit])
    }
}

/// A quoted, escaped string, cut to [`SHOWN_CHARS`] characters unless `full`.
fn fmt_str(s: &str, full: bool) -> String {
    let n = s.chars().count();
    if full || n <= SHOWN_CHARS {
        return format!("{s:?}");
    }
    let head: String = s.chars().take(SHOWN_CHARS).collect();
    let quoted = format!("{head:?}");
    format!("{}…\" ({n} chars)", &quoted[..quoted.len() - 1])
}

fn fmt_value(v: &Value, full: bool) -> String {
    match v {
        Value::U8(x) => x.to_string(),
        Value::I8(x) => x.to_string(),
        Value::U16(x) => x.to_string(),
        Value::I16(x) => x.to_string(),
        Value::U32(x) => x.to_string(),
        Value::I32(x) => x.to_string(),
        Value::U64(x) => x.to_string(),
        Value::I64(x) => x.to_string(),
        Value::F32(x) => format!("{x:?}"),
        Value::F64(x) => format!("{x:?}"),
        Value::Bool(x) => x.to_string(),
        Value::String(s) => fmt_str(s, full),
        Value::Array(a) => fmt_array(a, full),
    }
}

/// `[3 × string] ["a", "b", …]`.
fn fmt_array(a: &Array, full: bool) -> String {
    fn items<T>(v: &[T], full: bool, f: impl Fn(&T) -> String) -> String {
        let shown = if full {
            v.len()
        } else {
            v.len().min(SHOWN_ELEMS)
        };
        let mut parts: Vec<String> = v[..shown].iter().map(f).collect();
        if shown < v.len() {
            parts.push("…".into());
        }
        format!("[{}]", parts.join(", "))
    }
    let body = match a {
        Array::U8(v) => items(v, full, u8::to_string),
        Array::I8(v) => items(v, full, i8::to_string),
        Array::U16(v) => items(v, full, u16::to_string),
        Array::I16(v) => items(v, full, i16::to_string),
        Array::U32(v) => items(v, full, u32::to_string),
        Array::I32(v) => items(v, full, i32::to_string),
        Array::U64(v) => items(v, full, u64::to_string),
        Array::I64(v) => items(v, full, i64::to_string),
        Array::F32(v) => items(v, full, |x| format!("{x:?}")),
        Array::F64(v) => items(v, full, |x| format!("{x:?}")),
        Array::Bool(v) => items(v, full, bool::to_string),
        Array::String(v) => items(v, full, |s| fmt_str(s, full)),
        Array::Array(v) => items(v, full, |inner| fmt_array(inner, full)),
    };
    format!("[{} × {}] {body}", a.len(), a.elem_type().name())
}

/// `general.architecture`, and whether Kiln runs it (listing what it runs when not).
fn architecture(file: &GgufFile) -> String {
    match file.architecture() {
        Err(_) => format!(
            "none (supported: {})",
            kiln_model::supported_architectures().join(", ")
        ),
        Ok(arch) => match kiln_model::ArchDescriptor::by_gguf_name(arch) {
            Ok(_) => format!("{arch} (supported)"),
            Err(e) => format!("{arch} (not runnable: {e})"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_format::GgufWriter;

    fn sample() -> Arc<GgufFile> {
        let mut w = GgufWriter::new();
        w.add_metadata("general.architecture", "llama").unwrap();
        w.add_metadata("llama.block_count", 30u32).unwrap();
        let tokens: Vec<String> = (0..100).map(|i| format!("tok{i}")).collect();
        w.add_metadata("tokenizer.ggml.tokens", tokens).unwrap();
        w.add_metadata("tokenizer.chat_template", "x".repeat(500))
            .unwrap();
        w.add_metadata("t.nested", Array::Array(vec![Array::U8(vec![1, 2])]))
            .unwrap();
        w.add_tensor(
            "token_embd.weight",
            GgmlType::Q8_0,
            &[64, 3],
            vec![0; 6 * 34],
        )
        .unwrap();
        w.add_tensor("norm", GgmlType::F32, &[64], vec![0; 256])
            .unwrap();
        Arc::new(GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap())
    }

    fn render(full: bool) -> String {
        let mut out = Vec::new();
        print(&sample(), "sample.gguf", full, &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn report_abbreviates_arrays_and_long_strings() {
        let s = render(false);
        assert!(s.contains("tensors:      2\n"), "{s}");
        assert!(
            s.contains(r#"[100 × string] ["tok0", "tok1", "tok2", "tok3", "tok4", …]"#),
            "{s}"
        );
        assert!(
            s.contains(&format!("\"{}…\" (500 chars)", "x".repeat(80))),
            "{s}"
        );
        assert!(s.contains("[1 × array] [[2 × u8] [1, 2]]"), "{s}");
        assert!(s.contains("token_embd.weight  Q8_0     64 × 3"), "{s}");
        assert!(s.contains("  total          2"), "{s}");
        assert!(s.contains("architecture: llama (supported)\n"), "{s}");
    }

    #[test]
    fn an_architecture_kiln_does_not_run_is_flagged_with_the_supported_list() {
        let mut w = GgufWriter::new();
        w.add_metadata("general.architecture", "mllama").unwrap();
        let file = Arc::new(GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap());
        let mut out = Vec::new();
        print(&file, "x.gguf", false, &mut out).unwrap();
        let s = String::from_utf8(out).unwrap();
        let want = format!(
            "architecture: mllama (not runnable: unsupported architecture 'mllama'; supported: {})",
            kiln_model::supported_architectures().join(", ")
        );
        assert!(s.contains(&want), "{s}");
    }

    #[test]
    fn a_mixture_of_experts_shows_its_experts_and_the_bytes_a_token_reads() {
        let path = Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../testdata/hf-tiny/qwen2moe/model-f32.gguf"
        ));
        let mut out = Vec::new();
        run(path, false, &mut out).unwrap();
        let s = String::from_utf8(out).unwrap();
        assert!(
            s.contains(
                "experts:      4 per layer, 2 active, 1 shared (2 of 2 layers; expert FFN 16)\n"
            ),
            "{s}"
        );
        let model = kiln_model::Model::open(path).unwrap();
        let line = format!(
            "per token:    {} weight bytes read (",
            model.weight_bytes_per_token()
        );
        assert!(s.contains(&line), "{s}");
        assert!(model.weight_bytes_per_token() < model.weight_bytes());
    }

    #[test]
    fn full_report_shows_everything() {
        let s = render(true);
        assert!(s.contains(r#""tok99"]"#), "{s}");
        assert!(s.contains(&format!("\"{}\"", "x".repeat(500))), "{s}");
    }
}
