//! `cargo xtask synth --shape NAME --type MIX [-o FILE]`: a GGUF in the exact shape of a
//! real model (every dimension of it; the vocabulary of a shipped model of the same
//! family, whose tokenizer and tokenizer metadata it borrows), with random but valid
//! quantized blocks in the types `llama-quantize` would choose for that mix. For speed
//! work at sizes the shipped models do not reach: the file loads in Kiln and in llama.cpp,
//! so both measure the same bytes. Text generated from it is noise.
//!
//! The file is streamed to disk a block run at a time (never held in memory) and is
//! deterministic for a given shape, mix and seed.

pub mod blocks;
pub mod mix;
pub mod shapes;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use kiln_format::{GgmlType, GgufFile, GgufWriter, Metadata, Value};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

pub use mix::{Mix, Role, mix_names};
pub use shapes::{Family, Shape, shape, shape_names};

use crate::XtaskError;

/// `cargo xtask synth`: write a random-weight GGUF in a real model's shape.
#[derive(clap::Args, Debug)]
pub struct SynthArgs {
    /// The model shape (llama-3.2-1b, llama-3.2-3b, llama-3.1-8b, qwen2.5-1.5b, qwen2.5-3b,
    /// qwen2.5-7b, gemma-2-2b, olmoe-1b-7b, qwen3-30b-a3b).
    #[arg(long)]
    pub shape: String,
    /// The quantization mix (q4_0, q4_k_m, q5_k_m, q8_0).
    #[arg(long = "type", default_value = "q4_k_m")]
    pub mix: String,
    /// Where to write (default: `<kiln cache>/synth/<shape>-<mix>.gguf`).
    #[arg(long, short = 'o')]
    pub output: Option<PathBuf>,
    /// Seed of the random blocks.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Write the file even if it exists.
    #[arg(long)]
    pub force: bool,
    /// Keep only the first N layers (every width as the real model): a shape whose whole
    /// file does not fit beside everything else, measured per layer. The default file name
    /// gains `-<N>l`.
    #[arg(long)]
    pub layers: Option<u64>,
}

fn bad(message: String) -> XtaskError {
    XtaskError::BadArguments {
        command: "synth",
        message,
    }
}

fn failed(detail: String) -> XtaskError {
    XtaskError::StepFailed {
        step: "synth",
        detail,
    }
}

/// The shape and mix called `shape` and `mix`, or an error listing the known ones.
pub fn lookup(shape_name: &str, mix_name: &str) -> Result<(&'static Shape, Mix), XtaskError> {
    let s = shape(shape_name).ok_or_else(|| {
        bad(format!(
            "unknown shape '{shape_name}'; the shapes are {}",
            shape_names()
        ))
    })?;
    let m = Mix::parse(mix_name).ok_or_else(|| {
        bad(format!(
            "unknown type '{mix_name}'; the mixes are {}",
            mix_names()
        ))
    })?;
    Ok((s, m))
}

/// Where a synthetic file lives by default: `<kiln cache>/synth/<shape>-<mix>.gguf`.
pub fn default_path(shape: &Shape, mix: Mix) -> PathBuf {
    kiln_hub::cache_dir()
        .join("synth")
        .join(format!("{}-{}.gguf", shape.name, mix.name()))
}

/// `shape` cut to its first `layers` layers, or an error naming the range allowed.
pub fn with_layers(shape: &Shape, layers: u64) -> Result<Shape, XtaskError> {
    if layers == 0 || layers > shape.n_layer {
        return Err(bad(format!(
            "--layers {layers}: {} has {} layers; give 1 to {}",
            shape.name, shape.n_layer, shape.n_layer
        )));
    }
    Ok(Shape {
        n_layer: layers,
        ..*shape
    })
}

pub fn run(a: &SynthArgs) -> Result<(), XtaskError> {
    let (full, mix) = lookup(&a.shape, &a.mix)?;
    let shape = match a.layers {
        Some(n) => &with_layers(full, n)?,
        None => full,
    };
    let path = a.output.clone().unwrap_or_else(|| match a.layers {
        Some(n) => kiln_hub::cache_dir().join("synth").join(format!(
            "{}-{n}l-{}.gguf",
            shape.name,
            mix.name()
        )),
        None => default_path(shape, mix),
    });
    if path.exists() && !a.force {
        println!("{} exists (--force to write it again)", path.display());
        return Ok(());
    }
    ensure(shape, mix, &path, a.seed)
}

/// Writes the synthetic file of `shape` and `mix` to `path` (through a `.partial` file
/// renamed at the end, so an interrupted run leaves no file that looks complete).
pub fn ensure(shape: &Shape, mix: Mix, path: &Path, seed: u64) -> Result<(), XtaskError> {
    let donor_path = kiln_hub::resolve(shape.family.donor()).map_err(|e| {
        failed(format!(
            "the tokenizer donor {}: {e} (run `cargo xtask models`)",
            shape.family.donor()
        ))
    })?;
    let donor = GgufFile::open(&donor_path)
        .map_err(|e| failed(format!("cannot read {}: {e}", donor_path.display())))?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .map_err(|e| failed(format!("cannot create {}: {e}", dir.display())))?;
    }
    let partial = path.with_extension("gguf.partial");
    let started = Instant::now();
    eprintln!(
        "xtask synth: {} {} (tokenizer of {}) -> {}",
        shape.name,
        mix.name(),
        shape.family.donor(),
        path.display()
    );
    let (writer, plans) = build(shape, mix, donor.metadata())?;
    let mut fill = filler(&plans, seed);
    let bytes = writer
        .write_file_streaming(&partial, &mut fill)
        .map_err(|e| failed(format!("cannot write {}: {e}", partial.display())))?;
    std::fs::rename(&partial, path).map_err(|e| {
        failed(format!(
            "cannot rename {} to {}: {e}",
            partial.display(),
            path.display()
        ))
    })?;
    let secs = started.elapsed().as_secs_f64();
    println!(
        "{}: {} tensors, {:.2} GB in {secs:.1} s ({:.0} MB/s)",
        path.display(),
        plans.len(),
        bytes as f64 / 1e9,
        bytes as f64 / 1e6 / secs.max(1e-9)
    );
    Ok(())
}

/// How a tensor's values are made.
#[derive(Clone, Debug, PartialEq)]
pub enum Init {
    /// Random blocks ([`blocks::fill`]).
    Random,
    /// Every value 1 (norm weights).
    Ones,
    /// These values (RoPE frequency factors).
    Values(Vec<f32>),
}

/// One tensor of the file.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorPlan {
    pub name: String,
    pub ty: GgmlType,
    /// ggml order: `dims[0]` is the row length.
    pub dims: Vec<u64>,
    pub init: Init,
}

/// The tensors of `shape` in `mix`, for a vocabulary of `n_vocab`, in file order.
pub fn plan(shape: &Shape, mix: Mix, n_vocab: u64) -> Vec<TensorPlan> {
    let d = shape.n_embd;
    let q = shape.n_head * shape.head_dim;
    let kv = shape.n_head_kv * shape.head_dim;
    let nl = shape.n_layer;
    let mut v = Vec::new();
    let mut add = |name: String, role: Role, layer: u64, dims: &[u64], init: Init| {
        v.push(TensorPlan {
            name,
            ty: mix.tensor_type(role, layer, nl),
            dims: dims.to_vec(),
            init,
        })
    };
    let embd_role = if shape.tied {
        Role::Output
    } else {
        Role::TokenEmbedding
    };
    add(
        "token_embd.weight".into(),
        embd_role,
        0,
        &[d, n_vocab],
        Init::Random,
    );
    if let Some(r) = &shape.llama3_rope {
        add(
            "rope_freqs.weight".into(),
            Role::Vector,
            0,
            &[shape.head_dim / 2],
            Init::Values(r.freq_factors(shape.head_dim, shape.rope_theta)),
        );
    }
    for i in 0..nl {
        let n = |s: &str| format!("blk.{i}.{s}");
        add(n("attn_norm.weight"), Role::Vector, i, &[d], Init::Ones);
        add(n("attn_q.weight"), Role::Matrix, i, &[d, q], Init::Random);
        add(n("attn_k.weight"), Role::Matrix, i, &[d, kv], Init::Random);
        add(n("attn_v.weight"), Role::AttnV, i, &[d, kv], Init::Random);
        if shape.family == Family::Qwen2 {
            add(n("attn_q.bias"), Role::Vector, i, &[q], Init::Random);
            add(n("attn_k.bias"), Role::Vector, i, &[kv], Init::Random);
            add(n("attn_v.bias"), Role::Vector, i, &[kv], Init::Random);
        }
        add(
            n("attn_output.weight"),
            Role::Matrix,
            i,
            &[q, d],
            Init::Random,
        );
        if shape.family == Family::Gemma2 {
            add(
                n("post_attention_norm.weight"),
                Role::Vector,
                i,
                &[d],
                Init::Ones,
            );
        }
        match shape.family {
            // Whole-projection Q/K norms.
            Family::Olmoe => {
                add(n("attn_q_norm.weight"), Role::Vector, i, &[q], Init::Ones);
                add(n("attn_k_norm.weight"), Role::Vector, i, &[kv], Init::Ones);
            }
            Family::Qwen3Moe => {
                let hd = shape.head_dim;
                add(n("attn_q_norm.weight"), Role::Vector, i, &[hd], Init::Ones);
                add(n("attn_k_norm.weight"), Role::Vector, i, &[hd], Init::Ones);
            }
            _ => {}
        }
        add(n("ffn_norm.weight"), Role::Vector, i, &[d], Init::Ones);
        if let Some(m) = &shape.moe {
            // The router stays F32 (llama-quantize never quantizes `ffn_gate_inp`); the
            // 3-D expert tensors take the types of their dense counterparts.
            let (e, f) = (m.n_expert, m.n_ff_exp);
            add(
                n("ffn_gate_inp.weight"),
                Role::Vector,
                i,
                &[d, e],
                Init::Random,
            );
            add(
                n("ffn_gate_exps.weight"),
                Role::Matrix,
                i,
                &[d, f, e],
                Init::Random,
            );
            add(
                n("ffn_up_exps.weight"),
                Role::Matrix,
                i,
                &[d, f, e],
                Init::Random,
            );
            add(
                n("ffn_down_exps.weight"),
                Role::FfnDown,
                i,
                &[f, d, e],
                Init::Random,
            );
            continue;
        }
        add(
            n("ffn_gate.weight"),
            Role::Matrix,
            i,
            &[d, shape.n_ff],
            Init::Random,
        );
        add(
            n("ffn_up.weight"),
            Role::Matrix,
            i,
            &[d, shape.n_ff],
            Init::Random,
        );
        add(
            n("ffn_down.weight"),
            Role::FfnDown,
            i,
            &[shape.n_ff, d],
            Init::Random,
        );
        if shape.family == Family::Gemma2 {
            add(n("post_ffw_norm.weight"), Role::Vector, i, &[d], Init::Ones);
        }
    }
    add(
        "output_norm.weight".into(),
        Role::Vector,
        0,
        &[d],
        Init::Ones,
    );
    if !shape.tied {
        add(
            "output.weight".into(),
            Role::Output,
            0,
            &[d, n_vocab],
            Init::Random,
        );
    }
    v
}

/// The writer (metadata and streamed tensor slots) and the tensor plans of `shape` in
/// `mix`, borrowing the tokenizer metadata of `donor`.
pub fn build(
    shape: &Shape,
    mix: Mix,
    donor: &Metadata,
) -> Result<(GgufWriter, Vec<TensorPlan>), XtaskError> {
    let n_vocab = donor
        .str_array("tokenizer.ggml.tokens")
        .map_err(|e| failed(format!("the tokenizer donor has no vocabulary: {e}")))?
        .len() as u64;
    let plans = plan(shape, mix, n_vocab);
    let fmt = |e: kiln_format::FormatError| failed(e.to_string());
    let mut w = GgufWriter::new();
    let arch = shape.family.arch();
    let k = |s: &str| format!("{arch}.{s}");
    let u32_of = |x: u64| u32::try_from(x).unwrap_or(u32::MAX);
    let mut md: Vec<(String, Value)> = vec![
        ("general.architecture".into(), arch.into()),
        (
            "general.name".into(),
            format!("synthetic {} {}", shape.name, mix.name())
                .as_str()
                .into(),
        ),
        ("general.file_type".into(), mix.file_type().into()),
        ("general.quantization_version".into(), 2u32.into()),
        (k("context_length"), u32_of(shape.n_ctx_train).into()),
        (k("embedding_length"), u32_of(shape.n_embd).into()),
        (k("feed_forward_length"), u32_of(shape.n_ff).into()),
        (k("block_count"), u32_of(shape.n_layer).into()),
        (k("attention.head_count"), u32_of(shape.n_head).into()),
        (k("attention.head_count_kv"), u32_of(shape.n_head_kv).into()),
        (k("attention.key_length"), u32_of(shape.head_dim).into()),
        (k("attention.value_length"), u32_of(shape.head_dim).into()),
        (k("rope.dimension_count"), u32_of(shape.head_dim).into()),
        (k("rope.freq_base"), shape.rope_theta.into()),
        (k("attention.layer_norm_rms_epsilon"), shape.norm_eps.into()),
    ];
    if shape.family == Family::Gemma2 {
        md.push((
            k("attn_logit_softcapping"),
            shapes::GEMMA2_ATTN_SOFTCAP.into(),
        ));
        md.push((
            k("final_logit_softcapping"),
            shapes::GEMMA2_FINAL_SOFTCAP.into(),
        ));
        md.push((
            k("attention.sliding_window"),
            shapes::GEMMA2_SLIDING_WINDOW.into(),
        ));
    }
    if let Some(m) = &shape.moe {
        md.push((k("expert_count"), u32_of(m.n_expert).into()));
        md.push((k("expert_used_count"), u32_of(m.n_expert_used).into()));
        md.push((k("expert_feed_forward_length"), u32_of(m.n_ff_exp).into()));
    }
    for (key, value) in md {
        w.add_metadata(key, value).map_err(fmt)?;
    }
    for (key, value) in donor.iter().filter(|(k, _)| k.starts_with("tokenizer.")) {
        w.add_metadata(key, value.clone()).map_err(fmt)?;
    }
    for p in &plans {
        w.add_tensor_streamed(&p.name, p.ty, &p.dims).map_err(fmt)?;
    }
    Ok((w, plans))
}

/// FNV-1a of a tensor name: each tensor's random stream depends only on the seed and its
/// name, not on what came before it.
fn name_hash(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The callback that streams each planned tensor's bytes (in plan order), a run of blocks
/// of about 1 MiB at a time.
pub fn filler(
    plans: &[TensorPlan],
    seed: u64,
) -> impl FnMut(&str, &mut dyn Write) -> std::io::Result<()> + '_ {
    let mut next = plans.iter();
    let mut buf = Vec::new();
    move |name, out| {
        let p = next
            .next()
            .filter(|p| p.name == name)
            .ok_or_else(|| std::io::Error::other(format!("tensor {name} is out of plan order")))?;
        let elems: u64 = p.dims.iter().product();
        match &p.init {
            Init::Ones => {
                let ones: Vec<u8> = (0..elems).flat_map(|_| 1f32.to_le_bytes()).collect();
                out.write_all(&ones)?;
            }
            Init::Values(v) => {
                for x in v {
                    out.write_all(&x.to_le_bytes())?;
                }
            }
            Init::Random => {
                let mut rng = ChaCha8Rng::seed_from_u64(seed ^ name_hash(name));
                let block_elems = p.ty.block_elems() as u64;
                let block_bytes = p.ty.block_bytes();
                let mut blocks = elems / block_elems;
                let per_run = ((1usize << 20) / block_bytes).max(1) as u64;
                while blocks > 0 {
                    let n = blocks.min(per_run);
                    buf.resize(n as usize * block_bytes, 0);
                    blocks::fill(p.ty, &mut rng, &mut buf);
                    out.write_all(&buf)?;
                    blocks -= n;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
