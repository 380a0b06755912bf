//! Tracing of the forward pass's intermediate tensors.
//!
//! `KILN_TRACE=1` prints every intermediate tensor (name, shape, the first and last values of
//! each row, and the sum) to stderr, in the format of llama.cpp's `llama-eval-callback`, so
//! the two can be diffed op by op when outputs disagree. [`Session::set_trace_sink`] hands
//! the whole tensors to a closure instead (tests diff them against a reference forward).
//!
//! A trace point is a static name and a layer index, formatted only when something records
//! it: with tracing off, a point costs one branch and no allocation.
//!
//! [`Session::set_trace_sink`]: crate::Session::set_trace_sink

use std::fmt;
use std::sync::OnceLock;

/// One intermediate tensor of the forward pass: llama.cpp's name for it (`attn_norm`,
/// `Qcur`, `ffn_out`, ...) and, inside a block, the layer. Displays as llama.cpp names it:
/// `attn_norm-3`, `inp_scaled`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TracePoint {
    /// The tensor's name without the layer suffix.
    pub name: &'static str,
    /// The layer, for a tensor inside a block.
    pub layer: Option<usize>,
}

impl TracePoint {
    /// A tensor outside the blocks.
    pub(crate) const fn global(name: &'static str) -> TracePoint {
        TracePoint { name, layer: None }
    }

    /// A tensor of block `layer`.
    pub(crate) const fn layer(name: &'static str, layer: usize) -> TracePoint {
        TracePoint {
            name,
            layer: Some(layer),
        }
    }
}

impl fmt::Display for TracePoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.layer {
            Some(il) => write!(f, "{}-{il}", self.name),
            None => f.write_str(self.name),
        }
    }
}

/// Receives each traced tensor: its point, its values (token-major) and its row count.
pub type TraceSink = Box<dyn FnMut(TracePoint, &[f32], usize) + Send>;

fn env_enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("KILN_TRACE").is_some_and(|v| !v.is_empty() && v != "0"))
}

/// A session's tracing: to stderr when `KILN_TRACE` is set, to a sink when one is given.
pub(crate) struct Tracer {
    stderr: bool,
    sink: Option<TraceSink>,
}

impl Tracer {
    pub(crate) fn new() -> Tracer {
        Tracer {
            stderr: env_enabled(),
            sink: None,
        }
    }

    pub(crate) fn set_sink(&mut self, sink: Option<TraceSink>) {
        self.sink = sink;
    }

    /// Records `data` viewed as `rows` rows at `point`, if anything listens.
    #[inline]
    pub(crate) fn tensor(&mut self, point: TracePoint, data: &[f32], rows: usize) {
        if (self.stderr || self.sink.is_some()) && rows > 0 {
            self.record(point, data, rows);
        }
    }

    #[cold]
    fn record(&mut self, point: TracePoint, data: &[f32], rows: usize) {
        if let Some(sink) = &mut self.sink {
            sink(point, data, rows);
        }
        if self.stderr {
            eprint!("{}", summary(point, data, rows));
        }
    }
}

/// llama.cpp's `llama-eval-callback` summary of a tensor.
fn summary(point: TracePoint, data: &[f32], rows: usize) -> String {
    let cols = data.len() / rows;
    let mut out = format!("{point} = {{{cols}, {rows}}}\n");
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
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trace_points_display_as_llama_cpp_names_them() {
        assert_eq!(TracePoint::layer("attn_norm", 3).to_string(), "attn_norm-3");
        assert_eq!(TracePoint::global("inp_scaled").to_string(), "inp_scaled");
    }

    #[test]
    fn a_sink_receives_every_recorded_tensor() {
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let s = std::sync::Arc::clone(&seen);
        let mut t = Tracer {
            stderr: false,
            sink: None,
        };
        t.tensor(TracePoint::global("unheard"), &[1.0], 1);
        t.set_sink(Some(Box::new(move |p, d, r| {
            s.lock().unwrap().push((p.to_string(), d.to_vec(), r))
        })));
        t.tensor(TracePoint::layer("l_out", 0), &[1.0, 2.0], 2);
        t.tensor(TracePoint::layer("empty", 0), &[], 0);
        assert_eq!(
            *seen.lock().unwrap(),
            vec![("l_out-0".to_string(), vec![1.0, 2.0], 2)]
        );
    }
}
