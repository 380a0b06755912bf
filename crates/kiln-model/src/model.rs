//! The shared decoder: a model is a list of [`LayerSpec`]s bound by an architecture module,
//! and one forward pass serves every architecture.

use std::path::Path;
use std::sync::Arc;

use kiln_format::GgufFile;
use kiln_quant::{MatmulScratch, matmul_prepared};

use crate::attention::{AttnShape, attention};
use crate::kv::KvCache;
use crate::ops::{
    add_inplace, gated_activation, rms_norm, rms_norm_inplace, rope_apply, rope_table,
};
use crate::trace;
use crate::weights::{Weight, WeightStore};
use crate::{ModelConfig, ModelError};

/// The tensors and per-layer settings of one transformer block.
pub(crate) struct LayerSpec {
    pub attn_norm: Vec<f32>,
    pub wq: Weight,
    pub wk: Weight,
    pub wv: Weight,
    pub wo: Weight,
    pub bq: Option<Vec<f32>>,
    pub bk: Option<Vec<f32>>,
    pub bv: Option<Vec<f32>>,
    /// Per-head RMSNorm of queries and keys before RoPE.
    pub q_norm: Option<Vec<f32>>,
    pub k_norm: Option<Vec<f32>>,
    /// RMSNorm of the attention output before the residual add.
    pub post_attn_norm: Option<Vec<f32>>,
    pub ffn_norm: Vec<f32>,
    pub w_gate: Weight,
    pub w_up: Weight,
    pub w_down: Weight,
    /// RMSNorm of the FFN output before the residual add.
    pub post_ffn_norm: Option<Vec<f32>>,
    /// Attend to at most this many most recent positions.
    pub sliding_window: Option<usize>,
    pub rope_base: f32,
}

/// What an architecture module produces.
pub(crate) struct ModelSpec {
    pub cfg: ModelConfig,
    pub tok_embd: Weight,
    pub output_norm: Vec<f32>,
    pub output: Weight,
    pub layers: Vec<LayerSpec>,
    /// Multiplier for embedding rows (Gemma: √hidden).
    pub embed_scale: Option<f32>,
}

/// A loaded model: configuration plus weights left in the mapped file.
pub struct Model {
    store: WeightStore,
    spec: ModelSpec,
}

/// Which logits a forward pass returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Logits {
    /// Only for the last token (generation).
    Last,
    /// For every token of the call (perplexity, scoring).
    All,
}

impl Model {
    /// Opens a GGUF file and binds its tensors.
    pub fn open(path: impl AsRef<Path>) -> Result<Model, ModelError> {
        Model::from_gguf(Arc::new(GgufFile::open(path)?))
    }

    /// Binds the tensors of an opened GGUF file.
    pub fn from_gguf(file: Arc<GgufFile>) -> Result<Model, ModelError> {
        let store = WeightStore::new(file);
        let spec = crate::arch::build(store.file().metadata(), &store)?;
        Ok(Model { store, spec })
    }

    /// The model's hyper-parameters.
    pub fn config(&self) -> &ModelConfig {
        &self.spec.cfg
    }

    /// The file the weights live in.
    pub fn file(&self) -> &GgufFile {
        self.store.file()
    }

    /// Bytes of weights mapped from the file.
    pub fn weight_bytes(&self) -> u64 {
        self.store.file().tensors().iter().map(|t| t.n_bytes).sum()
    }
}

/// Per-sequence state: the KV cache, the position reached, and scratch buffers sized once.
pub struct Session {
    model: Arc<Model>,
    kv: KvCache,
    pos: usize,
    n_batch: usize,
    s: Scratch,
}

/// Buffers of the forward pass, allocated when the session is created.
struct Scratch {
    x: Vec<f32>,
    h: Vec<f32>,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    att: Vec<f32>,
    o: Vec<f32>,
    gate: Vec<f32>,
    up: Vec<f32>,
    head_out: Vec<f32>,
    attn_scratch: Vec<half::f16>,
    rope: Vec<f32>,
    logits: Vec<f32>,
    mm: MatmulScratch,
}

impl Session {
    /// A session that can hold `n_ctx` positions and evaluates up to `n_batch` tokens per
    /// internal step (longer inputs are processed in chunks).
    pub fn new(model: Arc<Model>, n_ctx: usize, n_batch: usize) -> Session {
        let cfg = model.config();
        let n_batch = n_batch.max(1);
        let hv = cfg.n_head * cfg.head_dim_v;
        let s = Scratch {
            x: vec![0.0; n_batch * cfg.n_embd],
            h: vec![0.0; n_batch * cfg.n_embd],
            q: vec![0.0; n_batch * cfg.q_dim()],
            k: vec![0.0; n_batch * cfg.k_dim()],
            v: vec![0.0; n_batch * cfg.v_dim()],
            att: vec![0.0; n_batch * hv],
            o: vec![0.0; n_batch * cfg.n_embd],
            gate: vec![0.0; n_batch * cfg.n_ff],
            up: vec![0.0; n_batch * cfg.n_ff],
            head_out: vec![0.0; n_batch * hv],
            attn_scratch: vec![half::f16::ZERO; cfg.n_head * (cfg.head_dim + cfg.head_dim_v)],
            rope: vec![0.0; n_batch * cfg.n_rot],
            logits: vec![0.0; cfg.vocab_size],
            mm: MatmulScratch::default(),
        };
        let kv = KvCache::new(cfg, n_ctx);
        Session {
            model,
            kv,
            pos: 0,
            n_batch,
            s,
        }
    }

    /// Positions already evaluated.
    pub fn pos(&self) -> usize {
        self.pos
    }

    /// The context size.
    pub fn n_ctx(&self) -> usize {
        self.kv.n_ctx()
    }

    /// Bytes held by the KV cache.
    pub fn kv_bytes(&self) -> usize {
        self.kv.bytes()
    }

    /// Forgets all positions from `pos` on (e.g. to start over).
    pub fn truncate(&mut self, pos: usize) {
        self.pos = self.pos.min(pos);
    }

    /// The model this session runs.
    pub fn model(&self) -> &Arc<Model> {
        &self.model
    }

    /// Evaluates `tokens` at the next positions and returns logits: `vocab` values for
    /// [`Logits::Last`], `tokens.len() × vocab` for [`Logits::All`].
    pub fn forward(&mut self, tokens: &[u32], mode: Logits) -> Result<&[f32], ModelError> {
        let cfg = self.model.config().clone();
        let needed = self.pos + tokens.len();
        if needed > self.kv.n_ctx() {
            return Err(ModelError::ContextOverflow {
                needed,
                n_ctx: self.kv.n_ctx(),
            });
        }
        if let Some(&id) = tokens.iter().find(|&&t| t as usize >= cfg.vocab_size) {
            return Err(ModelError::TokenOutOfRange {
                id,
                vocab: cfg.vocab_size,
            });
        }
        if tokens.is_empty() {
            return Ok(&self.s.logits[..0]);
        }
        let vocab = cfg.vocab_size;
        if mode == Logits::All {
            self.s.logits.resize(tokens.len() * vocab, 0.0);
        }
        let mut done = 0;
        for chunk in tokens.chunks(self.n_batch) {
            let last_chunk = done + chunk.len() == tokens.len();
            let out_rows = match mode {
                Logits::All => Some(done),
                Logits::Last if last_chunk => Some(usize::MAX),
                Logits::Last => None,
            };
            self.forward_chunk(chunk, out_rows)?;
            done += chunk.len();
        }
        Ok(match mode {
            Logits::Last => &self.s.logits[..vocab],
            Logits::All => &self.s.logits[..tokens.len() * vocab],
        })
    }

    /// One chunk of at most `n_batch` tokens. `out_rows`: `None` = no logits,
    /// `Some(usize::MAX)` = last row into `logits[..vocab]`, `Some(r)` = all rows into
    /// `logits[r*vocab..]`.
    fn forward_chunk(&mut self, tokens: &[u32], out_rows: Option<usize>) -> Result<(), ModelError> {
        let model = Arc::clone(&self.model);
        let spec = &model.spec;
        let store = &model.store;
        let cfg = &spec.cfg;
        let s = &mut self.s;
        let n = tokens.len();
        let pos0 = self.pos;
        let d = cfg.n_embd;
        let (qd, kd, vd, hv) = (
            cfg.q_dim(),
            cfg.k_dim(),
            cfg.v_dim(),
            cfg.n_head * cfg.head_dim_v,
        );

        // Embedding lookup.
        let embd = store.view(&spec.tok_embd)?;
        for (t, &tok) in tokens.iter().enumerate() {
            let row = &mut s.x[t * d..(t + 1) * d];
            embd.dequantize_row(tok as usize, row);
            if let Some(scale) = spec.embed_scale {
                row.iter_mut().for_each(|v| *v *= scale);
            }
        }

        trace::tensor("inp_scaled", &s.x[..n * d], n);
        let mut rope_base_of_table = f32::NAN;
        for (il, layer) in spec.layers.iter().enumerate() {
            // Attention block.
            for t in 0..n {
                rms_norm(
                    &s.x[t * d..(t + 1) * d],
                    &layer.attn_norm,
                    cfg.norm_eps,
                    &mut s.h[t * d..(t + 1) * d],
                );
            }
            trace::tensor(&format!("attn_norm-{il}"), &s.h[..n * d], n);
            s.mm.prepare(&s.h[..n * d], n, d);
            matmul_prepared(&store.view(&layer.wq)?, &mut s.mm, &mut s.q[..n * qd]);
            matmul_prepared(&store.view(&layer.wk)?, &mut s.mm, &mut s.k[..n * kd]);
            matmul_prepared(&store.view(&layer.wv)?, &mut s.mm, &mut s.v[..n * vd]);
            for (buf, bias, width) in [
                (&mut s.q, &layer.bq, qd),
                (&mut s.k, &layer.bk, kd),
                (&mut s.v, &layer.bv, vd),
            ] {
                if let Some(b) = bias {
                    for row in buf[..n * width].chunks_exact_mut(width) {
                        add_inplace(row, b);
                    }
                }
            }
            if let (Some(qn), Some(kn)) = (&layer.q_norm, &layer.k_norm) {
                for head in s.q[..n * qd].chunks_exact_mut(cfg.head_dim) {
                    rms_norm_inplace(head, qn, cfg.norm_eps);
                }
                for head in s.k[..n * kd].chunks_exact_mut(cfg.head_dim) {
                    rms_norm_inplace(head, kn, cfg.norm_eps);
                }
            }
            trace::tensor(&format!("Qcur_normed-{il}"), &s.q[..n * qd], n);
            trace::tensor(&format!("Kcur_normed-{il}"), &s.k[..n * kd], n);
            trace::tensor(&format!("Vcur-{il}"), &s.v[..n * vd], n);
            if layer.rope_base != rope_base_of_table {
                for t in 0..n {
                    rope_table(
                        pos0 + t,
                        cfg.n_rot,
                        layer.rope_base,
                        cfg.rope_freq_scale,
                        &mut s.rope[t * cfg.n_rot..(t + 1) * cfg.n_rot],
                    );
                }
                rope_base_of_table = layer.rope_base;
            }
            for t in 0..n {
                let table = &s.rope[t * cfg.n_rot..(t + 1) * cfg.n_rot];
                rope_apply(
                    &mut s.q[t * qd..(t + 1) * qd],
                    cfg.head_dim,
                    cfg.n_rot,
                    cfg.rope_style,
                    table,
                );
                rope_apply(
                    &mut s.k[t * kd..(t + 1) * kd],
                    cfg.head_dim,
                    cfg.n_rot,
                    cfg.rope_style,
                    table,
                );
                self.kv.store(
                    il,
                    pos0 + t,
                    &s.k[t * kd..(t + 1) * kd],
                    &s.v[t * vd..(t + 1) * vd],
                );
            }
            trace::tensor(&format!("Qcur-{il}"), &s.q[..n * qd], n);
            let shape = AttnShape {
                pos0,
                n_tokens: n,
                window: layer.sliding_window,
            };
            attention(
                cfg,
                &shape,
                &s.q[..n * qd],
                self.kv.keys(il),
                self.kv.values(il),
                &mut s.head_out,
                &mut s.attn_scratch,
                &mut s.att[..n * hv],
            );
            trace::tensor(&format!("kqv_out-{il}"), &s.att[..n * hv], n);
            s.mm.prepare(&s.att[..n * hv], n, hv);
            matmul_prepared(&store.view(&layer.wo)?, &mut s.mm, &mut s.o[..n * d]);
            if let Some(pn) = &layer.post_attn_norm {
                for row in s.o[..n * d].chunks_exact_mut(d) {
                    rms_norm_inplace(row, pn, cfg.norm_eps);
                }
            }
            trace::tensor(&format!("attn_post_norm-{il}"), &s.o[..n * d], n);
            add_inplace(&mut s.x[..n * d], &s.o[..n * d]);
            trace::tensor(&format!("sa_out-{il}"), &s.x[..n * d], n);

            // Feed-forward block.
            for t in 0..n {
                rms_norm(
                    &s.x[t * d..(t + 1) * d],
                    &layer.ffn_norm,
                    cfg.norm_eps,
                    &mut s.h[t * d..(t + 1) * d],
                );
            }
            let ff = cfg.n_ff;
            s.mm.prepare(&s.h[..n * d], n, d);
            matmul_prepared(
                &store.view(&layer.w_gate)?,
                &mut s.mm,
                &mut s.gate[..n * ff],
            );
            matmul_prepared(&store.view(&layer.w_up)?, &mut s.mm, &mut s.up[..n * ff]);
            trace::tensor(&format!("ffn_gate-{il}"), &s.gate[..n * ff], n);
            trace::tensor(&format!("ffn_up-{il}"), &s.up[..n * ff], n);
            gated_activation(&mut s.gate[..n * ff], &s.up[..n * ff], cfg.activation);
            trace::tensor(&format!("ffn_act-{il}"), &s.gate[..n * ff], n);
            s.mm.prepare(&s.gate[..n * ff], n, ff);
            matmul_prepared(&store.view(&layer.w_down)?, &mut s.mm, &mut s.o[..n * d]);
            if let Some(pn) = &layer.post_ffn_norm {
                for row in s.o[..n * d].chunks_exact_mut(d) {
                    rms_norm_inplace(row, pn, cfg.norm_eps);
                }
            }
            trace::tensor(&format!("ffn_post_norm-{il}"), &s.o[..n * d], n);
            add_inplace(&mut s.x[..n * d], &s.o[..n * d]);
            trace::tensor(&format!("l_out-{il}"), &s.x[..n * d], n);
        }
        self.pos += n;

        // Output head.
        let vocab = cfg.vocab_size;
        let output = store.view(&spec.output)?;
        match out_rows {
            None => {}
            Some(usize::MAX) => {
                let last = &s.x[(n - 1) * d..n * d];
                rms_norm(last, &spec.output_norm, cfg.norm_eps, &mut s.h[..d]);
                s.mm.prepare(&s.h[..d], 1, d);
                matmul_prepared(&output, &mut s.mm, &mut s.logits[..vocab]);
            }
            Some(r) => {
                for t in 0..n {
                    rms_norm(
                        &s.x[t * d..(t + 1) * d],
                        &spec.output_norm,
                        cfg.norm_eps,
                        &mut s.h[t * d..(t + 1) * d],
                    );
                }
                s.mm.prepare(&s.h[..n * d], n, d);
                matmul_prepared(
                    &output,
                    &mut s.mm,
                    &mut s.logits[r * vocab..(r + n) * vocab],
                );
            }
        }
        Ok(())
    }
}
