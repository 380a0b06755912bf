//! `KILN_TRACE=1`: prints every intermediate tensor of the forward pass (name, shape, the
//! first and last values of each row, and the sum) to stderr, in the format of llama.cpp's
//! `llama-eval-callback`, so the two can be diffed op by op when outputs disagree.

use std::sync::OnceLock;

fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("KILN_TRACE").is_some_and(|v| !v.is_empty() && v != "0"))
}

/// Prints `data` viewed as `rows` rows when tracing is on.
pub(crate) fn tensor(name: &str, data: &[f32], rows: usize) {
    if !enabled() || rows == 0 {
        return;
    }
    let cols = data.len() / rows;
    let mut out = format!("{name} = {{{cols}, {rows}}}\n");
    for row in data.chunks_exact(cols) {
        let f = |v: &[f32]| {
            v.iter()
                .map(|x| format!("{x:12.4}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        if cols > 6 {
            out.push_str(&format!(
                "  [{}, ..., {}]\n",
                f(&row[..3]),
                f(&row[cols - 3..])
            ));
        } else {
            out.push_str(&format!("  [{}]\n", f(row)));
        }
    }
    let sum: f64 = data.iter().map(|&v| v as f64).sum();
    out.push_str(&format!("  sum = {sum:.6}\n"));
    eprint!("{out}");
}
