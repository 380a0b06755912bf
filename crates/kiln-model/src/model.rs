//! The shared decoder: a model is a list of [`LayerSpec`]s bound by an architecture module,
//! and one forward pass serves every architecture.

use std::path::Path;
use std::sync::Arc;

use kiln_format::GgufFile;
use kiln_quant::{MatmulGroup, MatmulScratch, QMatrix, matmul_grouped, matmul_prepared};

use crate::attention::{AttnScratch, AttnShape, SeqAttn, attention_batch};
use crate::blocks::{
    Norm, activation_inplace, add_inplace, gated_activation, rms_norm_inplace, rope_apply,
    rope_table_with_factors, softcap_inplace,
};
use crate::kv::{KvOptions, MemoryPlan};
use crate::moe::MoeScratch;
use crate::pooling::Pooling;
use crate::spec::{DenseFfn, FfnSpec, LayerSpec, ModelSpec};
use crate::trace::{TracePoint, TraceSink, Tracer};
use crate::weights::{LoadOptions, SourceKind, Weight, WeightStore};
use crate::{ModelConfig, ModelError};
use kiln_kv::{KvCache, SeqId};

/// A loaded model: configuration plus weights left in the mapped file.
pub struct Model {
    store: WeightStore,
    spec: ModelSpec,
    /// The pooling the file declares for embeddings (`<arch>.pooling_type`), if any.
    pooling: Option<Pooling>,
}

/// Which logits a forward pass returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Logits {
    /// Only for the last token (generation).
    Last,
    /// For every token of the call (perplexity, scoring).
    All,
}

/// One sequence's share of a batched forward pass ([`Session::forward_batch`]).
#[derive(Clone, Copy, Debug)]
pub struct BatchSeq<'a> {
    /// The sequence whose next positions these tokens take.
    pub seq: SeqId,
    /// Its tokens for this step: one for decode, a chunk of its prompt for prefill.
    pub tokens: &'a [u32],
    /// Whether to return the logits of its last token.
    pub logits: bool,
    /// How many of `tokens`, from the first, run attention's prompt arithmetic (f32 query
    /// and accumulator; the rest run the one-row arithmetic, f16 query and accumulator) —
    /// see [`PROMPT_ATTENTION_MIN_ROWS`] and [`BatchSeq::prompt_rows`].
    pub prompt_rows: usize,
}

/// llama.cpp runs a pass's attention in its prompt arithmetic (the tiled flash attention:
/// f32 query, f32 accumulator) when a sequence has at least this many query rows in the
/// pass, and in its one-row arithmetic (f16 query, f16 accumulator) otherwise (decode,
/// short prompts). Kiln decides the same way, but from the length of the whole prompt
/// rather than of a chunk, so a prompt's rows compute the same however the engine chunks it.
pub const PROMPT_ATTENTION_MIN_ROWS: usize = 64;

impl BatchSeq<'_> {
    /// [`BatchSeq::prompt_rows`] for tokens starting at position `start` of a sequence whose
    /// prompt has `prompt_len` tokens: the prompt positions among them when the prompt has
    /// at least [`PROMPT_ATTENTION_MIN_ROWS`] tokens, else none.
    pub fn prompt_rows_of(start: usize, n_tokens: usize, prompt_len: usize) -> usize {
        if prompt_len >= PROMPT_ATTENTION_MIN_ROWS {
            prompt_len.saturating_sub(start).min(n_tokens)
        } else {
            0
        }
    }
}

/// Where a pass writes logits.
#[derive(Clone, Copy)]
enum OutRows {
    /// None.
    Skip,
    /// The last token of every row that asks for them, packed in row order from 0.
    LastOfRows,
    /// Every token (one row only) into `logits[r * vocab..]`.
    AllFrom(usize),
    /// Every token of every row that asks for logits, packed in row order from 0.
    AllOfRows,
    /// No logits: every token's final hidden state (after the output norm) into
    /// `hidden[r * n_embd..]` (one row only).
    HiddenFrom(usize),
}

impl Model {
    /// Opens a model: a GGUF file, or a Hugging Face model directory (`config.json` and
    /// safetensors), with default [`LoadOptions`].
    pub fn open(path: impl AsRef<Path>) -> Result<Model, ModelError> {
        Model::open_with(path, &LoadOptions::default())
    }

    /// [`Model::open`] with explicit options.
    pub fn open_with(path: impl AsRef<Path>, options: &LoadOptions) -> Result<Model, ModelError> {
        let path = path.as_ref();
        if path.is_dir() {
            Model::from_hf_dir(path, options)
        } else {
            Model::from_gguf_with(Arc::new(GgufFile::open(path)?), options)
        }
    }

    /// Binds the tensors of an opened GGUF file.
    pub fn from_gguf(file: Arc<GgufFile>) -> Result<Model, ModelError> {
        Model::from_gguf_with(file, &LoadOptions::default())
    }

    /// [`Model::from_gguf`] with explicit options.
    pub fn from_gguf_with(file: Arc<GgufFile>, options: &LoadOptions) -> Result<Model, ModelError> {
        check_options(options)?;
        let store = WeightStore::gguf(file, *options);
        let md = match store.gguf_file() {
            Some(f) => Arc::clone(f),
            None => unreachable!("a GGUF store has its file"),
        };
        let spec = crate::arch::build(md.metadata(), &store)?;
        let pooling = Pooling::declared(md.metadata())?;
        Ok(Model {
            store,
            spec,
            pooling,
        })
    }

    /// Loads a Hugging Face model directory: `config.json` (architecture and
    /// hyper-parameters) and `model.safetensors` or the shards of
    /// `model.safetensors.index.json`. F32/F16/BF16 weights are used in place unless
    /// `options.quantize` asks for a block type.
    pub fn from_hf_dir(dir: impl AsRef<Path>, options: &LoadOptions) -> Result<Model, ModelError> {
        check_options(options)?;
        let dir = dir.as_ref();
        let hf = crate::arch::read_hf_config(dir)?;
        let set = Arc::new(kiln_format::SafetensorsSet::open_dir(dir)?);
        hf.check_tensors(&set)?;
        let store = WeightStore::safetensors(set, hf.names, hf.extra, *options);
        let spec = crate::arch::build(&hf.metadata, &store)?;
        let pooling = Pooling::declared(&hf.metadata)?;
        Ok(Model {
            store,
            spec,
            pooling,
        })
    }

    /// The model's hyper-parameters.
    pub fn config(&self) -> &ModelConfig {
        &self.spec.cfg
    }

    /// The pooling the model file declares for embeddings (`<arch>.pooling_type`), `None`
    /// when it declares none (a generative model: llama.cpp then pools nothing).
    pub fn declared_pooling(&self) -> Option<Pooling> {
        self.pooling
    }

    /// The length of one hidden state (and of a pooled embedding).
    pub fn embedding_len(&self) -> usize {
        self.spec.cfg.n_embd
    }

    /// The GGUF file the weights live in, for a model loaded from GGUF.
    pub fn gguf(&self) -> Option<&GgufFile> {
        self.store.gguf_file().map(|f| f.as_ref())
    }

    /// Whether the weights come from GGUF or safetensors.
    pub fn source_kind(&self) -> SourceKind {
        self.store.kind()
    }

    /// Bytes of weights in the source files.
    pub fn weight_bytes(&self) -> u64 {
        self.store.source_bytes()
    }

    /// What loading did beyond mapping tensors (quantization fallbacks), one line each.
    pub fn load_notes(&self) -> Vec<String> {
        self.store.notes()
    }

    /// The mixture-of-experts shape of the model, `None` for a dense one.
    pub fn experts(&self) -> Option<ExpertsInfo> {
        let moe: Vec<_> = self.spec.layers.iter().filter_map(|l| l.moe()).collect();
        let first = moe.first()?;
        Some(ExpertsInfo {
            moe_layers: moe.len(),
            n_expert: first.cfg.n_expert,
            n_expert_used: first.cfg.n_expert_used,
            n_shared: usize::from(first.cfg.shared.is_some()),
            n_ff_exp: first.cfg.n_ff_exp,
        })
    }

    /// Weight bytes one decode step reads (the active parameters, in their stored types):
    /// one embedding row, every attention and dense feed-forward matrix, the routers, the
    /// `n_expert_used` experts a token is routed to and the shared experts, and the output
    /// head. For a dense model this is nearly [`Model::weight_bytes`]; for a mixture of
    /// experts it is what makes decoding fast.
    pub fn weight_bytes_per_token(&self) -> u64 {
        let bytes = |w: &Weight| {
            w.ty.row_bytes(w.cols as u64)
                .map_or(0, |rb| rb.saturating_mul(w.rows as u64))
        };
        let spec = &self.spec;
        let one_row = |w: &Weight| w.ty.row_bytes(w.cols as u64).unwrap_or(0);
        let mut total = one_row(&spec.tok_embd) + bytes(&spec.output);
        if let Some(p) = &spec.pos_embd {
            total += one_row(p);
        }
        for l in &spec.layers {
            total += [&l.wq, &l.wk, &l.wv, &l.wo]
                .into_iter()
                .map(bytes)
                .sum::<u64>();
            total += match &l.ffn {
                FfnSpec::Dense(f) => [f.w_gate.as_ref(), Some(&f.w_up), Some(&f.w_down)]
                    .into_iter()
                    .flatten()
                    .map(bytes)
                    .sum::<u64>(),
                FfnSpec::Moe(m) => m.layer.bytes_read(m.cfg.n_expert_used),
            };
        }
        total
    }
}

/// A mixture-of-experts model's expert shape ([`Model::experts`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExpertsInfo {
    /// Layers whose feed-forward is a mixture of experts.
    pub moe_layers: usize,
    /// Experts per layer.
    pub n_expert: usize,
    /// Experts each token is routed to (top-k).
    pub n_expert_used: usize,
    /// Shared (always-on) experts per layer.
    pub n_shared: usize,
    /// Inner size of one expert.
    pub n_ff_exp: usize,
}

fn check_options(options: &LoadOptions) -> Result<(), ModelError> {
    match options.quantize {
        Some(t) if !kiln_quant::quantize_types().contains(&t) => {
            Err(ModelError::UnsupportedQuantization {
                requested: t.name().to_string(),
                supported: kiln_quant::quantize_types()
                    .iter()
                    .map(|t| t.name())
                    .collect(),
            })
        }
        _ => Ok(()),
    }
}

/// A model's working state: a paged KV cache (`kiln-kv`) holding one or more sequences, the
/// sequence being evaluated, and scratch buffers sized once.
///
/// A session starts with one empty sequence. [`Session::fork`] makes another that shares
/// the current one's KV pages (copy-on-write), [`Session::select`] switches between them,
/// and [`Session::reuse_prefix`] starts an empty sequence from cached pages of an earlier
/// one with the same prompt prefix.
pub struct Session {
    model: Arc<Model>,
    kv: KvCache,
    seq: SeqId,
    n_ctx: usize,
    n_batch: usize,
    s: Scratch,
    trace: Tracer,
}

/// Buffers of the forward pass, allocated when the session is created and reused by every
/// pass: after the first passes of a size, a decode step allocates nothing (checked by the
/// `zero_alloc` test).
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
    attn: AttnScratch,
    rope: Vec<f32>,
    logits: Vec<f32>,
    /// Final hidden states for [`Session::hidden_states`] (empty until it is called).
    hidden: Vec<f32>,
    mm: MatmulScratch,
    /// The mixture-of-experts block's buffers (empty for a dense model).
    moe: MoeScratch,
    /// The first position of each row of a pass.
    starts: Vec<usize>,
    /// Attention's per-sequence descriptors (empty between layers; see [`recycle`]).
    seqs: Vec<SeqAttn<'static>>,
}

impl Session {
    /// A session whose sequences hold up to `n_ctx` positions and that evaluates up to
    /// `n_batch` tokens per internal step (longer inputs are processed in chunks), with the
    /// default KV cache: f16 K and V, 16-token pages, room for one `n_ctx` sequence.
    pub fn new(model: Arc<Model>, n_ctx: usize, n_batch: usize) -> Session {
        match Session::with_kv(model, n_ctx, n_batch, &KvOptions::default()) {
            Ok(s) => s,
            // f16 pages fit every head size and a validated model has no zero dimension.
            Err(e) => unreachable!("the default KV cache cannot be refused: {e}"),
        }
    }

    /// [`Session::new`] with explicit KV cache options. Refuses a cache that cannot hold
    /// one sequence of `n_ctx` positions.
    pub fn with_kv(
        model: Arc<Model>,
        n_ctx: usize,
        n_batch: usize,
        kv: &KvOptions,
    ) -> Result<Session, ModelError> {
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
            attn: AttnScratch::new(cfg, n_batch, kv.block_size, kv.k_type, kv.v_type),
            rope: vec![0.0; n_batch * cfg.n_rot],
            logits: vec![0.0; cfg.vocab_size],
            hidden: Vec::new(),
            mm: MatmulScratch::with_group_capacity(FUSED_MAX_GROUPS),
            moe: MoeScratch::default(),
            starts: Vec::with_capacity(n_batch),
            // A row contributes at most two descriptors (prompt and decode arithmetic).
            seqs: Vec::with_capacity(2 * n_batch),
        };
        let n_blocks = kv.n_blocks(cfg, n_ctx);
        let kv_cfg = kv.config(cfg, n_blocks);
        let need = kv_cfg.blocks_for_tokens(n_ctx);
        if n_blocks < need {
            return Err(kiln_kv::KvError::OutOfMemory {
                needed: need,
                available: n_blocks,
            }
            .into());
        }
        let mut cache = KvCache::new(kv_cfg)?;
        let seq = cache.create_sequence(n_ctx);
        Ok(Session {
            model,
            kv: cache,
            seq,
            n_ctx,
            n_batch,
            s,
            trace: Tracer::new(),
        })
    }

    /// Positions of the current sequence already evaluated.
    pub fn pos(&self) -> usize {
        self.kv.len(self.seq).unwrap_or(0)
    }

    /// The most positions a sequence may hold.
    pub fn n_ctx(&self) -> usize {
        self.n_ctx
    }

    /// Bytes of the KV cache's pool.
    pub fn kv_bytes(&self) -> usize {
        self.kv.config().bytes_total().unwrap_or(usize::MAX)
    }

    /// Forgets the current sequence's positions from `pos` on (e.g. to start over).
    pub fn truncate(&mut self, pos: usize) {
        // The current sequence always exists (see `select`).
        let _ = self.kv.truncate(self.seq, pos);
    }

    /// The KV cache (statistics, block tables).
    pub fn kv(&self) -> &KvCache {
        &self.kv
    }

    /// The sequence [`Session::forward`] evaluates.
    pub fn sequence(&self) -> SeqId {
        self.seq
    }

    /// Makes `seq` the current sequence.
    pub fn select(&mut self, seq: SeqId) -> Result<(), ModelError> {
        self.kv.len(seq)?;
        self.seq = seq;
        Ok(())
    }

    /// A new sequence sharing every position of the current one (its pages are shared until
    /// one side writes). The current sequence stays current.
    pub fn fork(&mut self) -> Result<SeqId, ModelError> {
        Ok(self.kv.fork_sequence(self.seq)?)
    }

    /// A new, empty sequence (not selected).
    pub fn new_sequence(&mut self) -> SeqId {
        self.kv.create_sequence(self.n_ctx)
    }

    /// Frees a sequence that is not the current one; its cached pages stay findable by
    /// [`Session::reuse_prefix`] until the space is needed.
    pub fn free_sequence(&mut self, seq: SeqId) -> Result<(), ModelError> {
        if seq == self.seq {
            return Err(kiln_kv::KvError::SequenceInUse { seq }.into());
        }
        Ok(self.kv.free_sequence(seq)?)
    }

    /// Starts the current (empty) sequence with the cached KV of the longest prefix of
    /// `tokens` that an earlier sequence evaluated, in whole pages, leaving at least the last
    /// token to evaluate. Returns how many tokens were reused: evaluate `tokens[n..]` next.
    pub fn reuse_prefix(&mut self, tokens: &[u32]) -> Result<usize, ModelError> {
        let max = tokens.len().saturating_sub(1).min(self.n_ctx);
        Ok(self.kv.attach_prefix(self.seq, tokens, max)?.tokens)
    }

    /// Where the session's memory goes.
    pub fn memory_plan(&self) -> MemoryPlan {
        let c = self.kv.config();
        let s = &self.s;
        let floats = s.x.len()
            + s.h.len()
            + s.q.len()
            + s.k.len()
            + s.v.len()
            + s.att.len()
            + s.o.len()
            + s.gate.len()
            + s.up.len()
            + s.rope.len()
            + s.logits.len();
        MemoryPlan {
            weight_bytes: self.model.weight_bytes(),
            k_type: c.k_type,
            v_type: c.v_type,
            kv_blocks: c.n_blocks,
            kv_block_tokens: c.block_size,
            kv_block_bytes: c.block_bytes(),
            kv_bytes_per_token: c.bytes_per_token(),
            scratch_bytes: 4 * floats + s.attn.bytes(),
        }
    }

    /// The model this session runs.
    pub fn model(&self) -> &Arc<Model> {
        &self.model
    }

    /// Hands every intermediate tensor of the following passes to `sink` (`None`: stop),
    /// under llama.cpp's names ([`TracePoint`]), token-major with its row count. For
    /// debugging and for tests that diff the pass against a reference; with no sink (and
    /// `KILN_TRACE` unset) tracing costs nothing.
    pub fn set_trace_sink(&mut self, sink: Option<TraceSink>) {
        self.trace.set_sink(sink);
    }

    /// Evaluates `tokens` at the next positions and returns logits: `vocab` values for
    /// [`Logits::Last`], `tokens.len() × vocab` for [`Logits::All`].
    ///
    /// A call of several tokens is taken as (the rest of) the sequence's prompt, ending
    /// where the call ends, and one token as a decode step: this picks attention's prompt
    /// or one-row arithmetic ([`PROMPT_ATTENTION_MIN_ROWS`]).
    pub fn forward(&mut self, tokens: &[u32], mode: Logits) -> Result<&[f32], ModelError> {
        let model = Arc::clone(&self.model);
        let cfg = model.config();
        let needed = self.kv.len(self.seq)? + tokens.len();
        if needed > self.n_ctx {
            return Err(ModelError::ContextOverflow {
                needed,
                n_ctx: self.n_ctx,
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
        let pos0 = needed - tokens.len();
        let mut done = 0;
        for chunk in tokens.chunks(self.n_batch) {
            let last_chunk = done + chunk.len() == tokens.len();
            let out = match mode {
                Logits::All => OutRows::AllFrom(done),
                Logits::Last if last_chunk => OutRows::LastOfRows,
                Logits::Last => OutRows::Skip,
            };
            // A call of several tokens is (the rest of) its sequence's prompt, which ends
            // where the call ends; one token is a decode step. So a prompt's rows compute
            // the same whether it is evaluated whole, in chunks, or after a reused prefix.
            let row = BatchSeq {
                seq: self.seq,
                tokens: chunk,
                logits: last_chunk,
                prompt_rows: if tokens.len() > 1 {
                    BatchSeq::prompt_rows_of(pos0 + done, chunk.len(), pos0 + tokens.len())
                } else {
                    0
                },
            };
            self.forward_rows(&[row], out, true)?;
            done += chunk.len();
        }
        Ok(match mode {
            Logits::Last => &self.s.logits[..vocab],
            Logits::All => &self.s.logits[..tokens.len() * vocab],
        })
    }

    /// Evaluates `tokens` at the next positions of the current sequence, as
    /// [`Session::forward`] does, and returns every token's final hidden state instead of
    /// logits: after the output norm, before the output projection (what llama.cpp returns
    /// as a generative model's embeddings), `tokens.len() × n_embd` values, token-major.
    /// `tokens` is a whole prompt: its attention runs in the arithmetic llama.cpp picks for
    /// a prompt of that length ([`PROMPT_ATTENTION_MIN_ROWS`]). Pool them with
    /// [`Pooling::pool`].
    pub fn hidden_states(&mut self, tokens: &[u32]) -> Result<&[f32], ModelError> {
        let model = Arc::clone(&self.model);
        let cfg = model.config();
        let needed = self.kv.len(self.seq)? + tokens.len();
        if needed > self.n_ctx {
            return Err(ModelError::ContextOverflow {
                needed,
                n_ctx: self.n_ctx,
            });
        }
        if let Some(&id) = tokens.iter().find(|&&t| t as usize >= cfg.vocab_size) {
            return Err(ModelError::TokenOutOfRange {
                id,
                vocab: cfg.vocab_size,
            });
        }
        let d = cfg.n_embd;
        self.s.hidden.resize(tokens.len() * d, 0.0);
        let mut done = 0;
        for chunk in tokens.chunks(self.n_batch) {
            let row = BatchSeq {
                seq: self.seq,
                tokens: chunk,
                logits: false,
                // The attention arithmetic llama.cpp gives a prompt of this length: the
                // one-row arithmetic (f16 query and accumulator) under
                // PROMPT_ATTENTION_MIN_ROWS tokens, as llama-server embeds a short input.
                prompt_rows: BatchSeq::prompt_rows_of(done, chunk.len(), tokens.len()),
            };
            self.forward_rows(&[row], OutRows::HiddenFrom(done), true)?;
            done += chunk.len();
        }
        Ok(&self.s.hidden[..tokens.len() * d])
    }

    /// Evaluates several sequences in one pass over the weights: every row's tokens take
    /// its sequence's next positions, the matrix products run over all rows' tokens at
    /// once, and RoPE and attention run per row through its own block table. Returns the
    /// logits of the last token of each row with `logits: true`, `vocab` values each, in
    /// row order.
    ///
    /// A row's logits are bit-identical whether it runs alone ([`Session::forward`]) or in
    /// any batch: the matrix kernels are batch-invariant and attention is per row. The
    /// rows' tokens must fit the session's `n_batch` together, each sequence may appear
    /// once, and no row may be empty. On an error no row's positions are kept.
    pub fn forward_batch(&mut self, rows: &[BatchSeq<'_>]) -> Result<&[f32], ModelError> {
        self.forward_batch_checked(rows)?;
        let vocab = self.model.config().vocab_size;
        if rows.is_empty() {
            return Ok(&self.s.logits[..0]);
        }
        self.forward_rows(rows, OutRows::LastOfRows, true)?;
        let n_out = rows.iter().filter(|r| r.logits).count();
        Ok(&self.s.logits[..n_out * vocab])
    }

    /// Checks a batch's rows: within `n_batch`, no empty row, no sequence twice, within
    /// the context, every token in the vocabulary.
    fn forward_batch_checked(&self, rows: &[BatchSeq<'_>]) -> Result<(), ModelError> {
        let vocab = self.model.config().vocab_size;
        let total: usize = rows.iter().map(|r| r.tokens.len()).sum();
        if total > self.n_batch {
            return Err(ModelError::InvalidBatch(format!(
                "{total} tokens in one pass, the session evaluates at most {}",
                self.n_batch
            )));
        }
        for (i, r) in rows.iter().enumerate() {
            if r.tokens.is_empty() {
                return Err(ModelError::InvalidBatch(format!(
                    "row {i} (sequence {}) has no token",
                    r.seq
                )));
            }
            if rows[..i].iter().any(|o| o.seq == r.seq) {
                return Err(ModelError::InvalidBatch(format!(
                    "sequence {} appears twice",
                    r.seq
                )));
            }
            let needed = self.kv.len(r.seq)? + r.tokens.len();
            if needed > self.n_ctx {
                return Err(ModelError::ContextOverflow {
                    needed,
                    n_ctx: self.n_ctx,
                });
            }
            if let Some(&id) = r.tokens.iter().find(|&&t| t as usize >= vocab) {
                return Err(ModelError::TokenOutOfRange { id, vocab });
            }
        }
        Ok(())
    }

    /// [`Session::forward_batch`] for scoring drafted tokens (speculative decoding): a row
    /// with `logits: true` returns the logits of *every* one of its tokens, `vocab` values
    /// each, packed in row order. A row `[last, d1, …, dk]` with `prompt_rows: 0` runs every
    /// token in the one-row (decode) arithmetic, so its logits are bit-identical to those of
    /// `k + 1` single-token decode steps.
    ///
    /// The pass makes none of its pages findable by the prefix cache: rejected tokens must
    /// never be served to another request. Call [`Session::settle`] on every row's sequence
    /// afterwards, with the positions it keeps.
    pub fn forward_scored(&mut self, rows: &[BatchSeq<'_>]) -> Result<&[f32], ModelError> {
        self.forward_batch_checked(rows)?;
        if rows.is_empty() {
            return Ok(&self.s.logits[..0]);
        }
        let vocab = self.model.config().vocab_size;
        let n_out: usize = rows
            .iter()
            .filter(|r| r.logits)
            .map(|r| r.tokens.len())
            .sum();
        self.forward_rows(rows, OutRows::AllOfRows, false)?;
        Ok(&self.s.logits[..n_out * vocab])
    }

    /// Keeps the first `len` positions of `seq` (the tokens a verification accepted),
    /// frees the blocks past them, and makes its full pages findable by the prefix cache.
    pub fn settle(&mut self, seq: SeqId, len: usize) -> Result<(), ModelError> {
        self.kv.truncate(seq, len)?;
        self.kv.commit(seq)?;
        Ok(())
    }

    /// Reserves KV blocks for `n_tokens` more positions of `seq` (so a following pass
    /// cannot run out of blocks for it). Fails with [`kiln_kv::KvError::OutOfMemory`],
    /// changing nothing, when the pool is short.
    pub fn reserve(&mut self, seq: SeqId, n_tokens: usize) -> Result<(), ModelError> {
        Ok(self.kv.extend(seq, n_tokens)?)
    }

    /// Positions `seq` holds.
    pub fn seq_len(&self, seq: SeqId) -> Result<usize, ModelError> {
        Ok(self.kv.len(seq)?)
    }

    /// Starts the empty sequence `seq` (not necessarily the current one) with the cached
    /// KV of the longest prefix of `tokens` an earlier sequence evaluated, in whole pages,
    /// leaving at least the last token to evaluate. Counts the query in the prefix stats.
    pub fn attach_prefix(
        &mut self,
        seq: SeqId,
        tokens: &[u32],
    ) -> Result<kiln_kv::PrefixHit, ModelError> {
        let max = tokens.len().saturating_sub(1).min(self.n_ctx);
        Ok(self.kv.attach_prefix(seq, tokens, max)?)
    }

    /// Runs `rows` (validated) through the model, writing logits as `out` says, and with
    /// `commit` makes the rows' full pages findable. On an error every row's claimed
    /// positions are given back.
    fn forward_rows(
        &mut self,
        rows: &[BatchSeq<'_>],
        out: OutRows,
        commit: bool,
    ) -> Result<(), ModelError> {
        // The start of every row, in a buffer kept across passes (sized for `n_batch` rows).
        let mut starts = std::mem::take(&mut self.s.starts);
        starts.clear();
        let mut result = Ok(());
        for r in rows {
            match self.kv.append(r.seq, r.tokens) {
                Ok(range) => starts.push(range.start),
                Err(e) => {
                    result = Err(e.into());
                    break;
                }
            }
        }
        if result.is_ok() {
            result = self.forward_appended(rows, &starts, out, commit);
        }
        if result.is_err() {
            self.give_back(rows, &starts);
        }
        self.s.starts = starts;
        result
    }

    /// Truncates the first `starts.len()` rows' sequences back to where they started.
    fn give_back(&mut self, rows: &[BatchSeq<'_>], starts: &[usize]) {
        for (r, &p) in rows.iter().zip(starts) {
            // The sequence exists: it was just appended to.
            let _ = self.kv.truncate(r.seq, p);
        }
    }

    /// The pass itself, once every row's positions are claimed (row `i` starts at
    /// `starts[i]`): the embedding, each layer's attention and feed-forward blocks, the
    /// output head.
    fn forward_appended(
        &mut self,
        rows: &[BatchSeq<'_>],
        starts: &[usize],
        out: OutRows,
        commit: bool,
    ) -> Result<(), ModelError> {
        let model = Arc::clone(&self.model);
        let mut pass = Pass {
            spec: &model.spec,
            store: &model.store,
            cfg: &model.spec.cfg,
            batch: Batch {
                rows,
                starts,
                n: rows.iter().map(|r| r.tokens.len()).sum(),
            },
            s: &mut self.s,
            kv: &mut self.kv,
            trace: &mut self.trace,
            rope_base_of_table: f32::NAN,
        };
        pass.embed()?;
        for (il, layer) in model.spec.layers.iter().enumerate() {
            pass.attention_block(il, layer)?;
            pass.ffn_block(il, layer)?;
        }
        // The rows' pages are complete in every layer: make full ones findable (a scoring
        // pass leaves that to `settle`, once the rejected positions are gone).
        if commit {
            for r in rows {
                pass.kv.commit(r.seq)?;
            }
        }
        pass.head(out)
    }
}

/// Up to this many tokens, matrices that read the same input (Q, K and V; gate and up) run
/// in one parallel region ([`matmul_grouped`]): the threads meet once for all of them rather
/// than once per matrix. At decode a layer's meetings drop from eight to five; each costs the
/// wait for the slower thread's last task, which at a few hundred microseconds per matrix is
/// a measurable share. Beyond this, a pass is prefill, whose GEMM also splits the tokens
/// between threads. Outputs are bit-identical either way (one dot kernel per element).
const FUSED_MAX_TOKENS: usize = 8;

/// Matrices of one fused region at most (Q, K and V). The session's matmul scratch holds
/// that many in its task plan from creation: a pass of more tokens never runs a grouped
/// call, so the first pass of fewer (sequences finishing, drafts running out) would
/// otherwise grow the plan mid-serving.
const FUSED_MAX_GROUPS: usize = 3;

/// `w` over all `n` prepared rows into output `out` of a [`matmul_grouped`] call.
fn fused(w: QMatrix<'_>, n: usize, out: usize) -> MatmulGroup<'_> {
    MatmulGroup {
        w,
        first: 0,
        n,
        out,
        out_row: 0,
    }
}

/// The rows of one pass and where each starts.
struct Batch<'a> {
    rows: &'a [BatchSeq<'a>],
    /// Row `i`'s first position.
    starts: &'a [usize],
    /// Tokens of all rows.
    n: usize,
}

impl<'a> Batch<'a> {
    /// The position of every token of the pass, in row order.
    fn positions(&self) -> impl Iterator<Item = usize> + 'a {
        self.rows
            .iter()
            .zip(self.starts)
            .flat_map(|(r, &p0)| (0..r.tokens.len()).map(move |i| p0 + i))
    }

    /// Every token of the pass, in row order.
    fn tokens(&self) -> impl Iterator<Item = u32> + 'a {
        self.rows.iter().flat_map(|r| r.tokens.iter().copied())
    }
}

/// One forward pass over a batch: the model, the session's buffers and cache.
///
/// The residual stream is `s.x` (`n × n_embd`, token-major). A block reads it, normalises
/// into `s.h`, and adds its output back: attention through `s.q`/`s.k`/`s.v`/`s.att` into
/// `s.o`, the feed-forward through `s.up`/`s.gate` into `s.o` (or `s.h` for parallel blocks,
/// whose feed-forward reads the attention norm's output and whose two outputs are added to
/// the residual together).
struct Pass<'a> {
    spec: &'a ModelSpec,
    store: &'a WeightStore,
    cfg: &'a ModelConfig,
    batch: Batch<'a>,
    s: &'a mut Scratch,
    kv: &'a mut KvCache,
    trace: &'a mut Tracer,
    /// The RoPE base the tables in `s.rope` were computed for (layers may differ: Gemma 3's
    /// local and global layers).
    rope_base_of_table: f32,
}

impl Pass<'_> {
    /// Embedding lookup (scaled for Gemma), plus the learned position (GPT-2), into `s.x`.
    fn embed(&mut self) -> Result<(), ModelError> {
        let (spec, s, b) = (self.spec, &mut *self.s, &self.batch);
        let d = self.cfg.n_embd;
        let embd = self.store.view(&spec.tok_embd)?;
        let pos_embd = match &spec.pos_embd {
            Some(w) => {
                if let Some(end) = b
                    .rows
                    .iter()
                    .zip(b.starts)
                    .map(|(r, &p0)| p0 + r.tokens.len())
                    .find(|&end| end > w.rows)
                {
                    return Err(ModelError::ContextOverflow {
                        needed: end,
                        n_ctx: w.rows,
                    });
                }
                Some(self.store.view(w)?)
            }
            None => None,
        };
        for (t, (tok, pos)) in b.tokens().zip(b.positions()).enumerate() {
            let row = &mut s.x[t * d..(t + 1) * d];
            embd.dequantize_row(tok as usize, row);
            if let Some(scale) = spec.embed_scale {
                row.iter_mut().for_each(|v| *v *= scale);
            }
            if let Some(pe) = &pos_embd {
                let h = &mut s.h[..d];
                pe.dequantize_row(pos, h);
                add_inplace(row, h);
            }
        }
        self.trace
            .tensor(TracePoint::global("inp_scaled"), &s.x[..b.n * d], b.n);
        Ok(())
    }

    /// Copies every token of `s.x` into `s.h`: the input of a block without a pre-norm.
    fn copy_rows(&mut self) {
        let n = self.batch.n * self.cfg.n_embd;
        self.s.h[..n].copy_from_slice(&self.s.x[..n]);
    }

    /// Normalises every token of `s.x` into `s.h`.
    fn norm_rows(&mut self, norm: &Norm) {
        let (cfg, s, d) = (self.cfg, &mut *self.s, self.cfg.n_embd);
        for t in 0..self.batch.n {
            norm.apply(
                cfg.norm,
                cfg.norm_eps,
                &s.x[t * d..(t + 1) * d],
                &mut s.h[t * d..(t + 1) * d],
            );
        }
    }

    /// The attention block of layer `il`: norm, Q/K/V projections (biases, per-head
    /// norms), RoPE, the rows' K and V into the cache, attention (each sequence through its
    /// own block table, all in one parallel pass), the output projection (post-norm), and,
    /// for sequential blocks, the residual add.
    fn attention_block(&mut self, il: usize, layer: &LayerSpec) -> Result<(), ModelError> {
        match &layer.attn_norm {
            Some(norm) => self.norm_rows(norm),
            None => self.copy_rows(),
        }
        let (cfg, store, n) = (self.cfg, self.store, self.batch.n);
        let d = cfg.n_embd;
        let (qd, kd, vd, hv) = (
            cfg.q_dim(),
            cfg.k_dim(),
            cfg.v_dim(),
            cfg.n_head * cfg.head_dim_v,
        );
        let tr = &mut *self.trace;
        let s = &mut *self.s;
        tr.tensor(TracePoint::layer("attn_norm", il), &s.h[..n * d], n);
        s.mm.prepare(&s.h[..n * d], n, d);
        let (wq, wk, wv) = (
            store.view(&layer.wq)?,
            store.view(&layer.wk)?,
            store.view(&layer.wv)?,
        );
        if n <= FUSED_MAX_TOKENS {
            // One parallel region for the three projections (see `FUSED_MAX_TOKENS`).
            let groups: [_; FUSED_MAX_GROUPS] = [fused(wq, n, 0), fused(wk, n, 1), fused(wv, n, 2)];
            let outs = [&mut s.q[..n * qd], &mut s.k[..n * kd], &mut s.v[..n * vd]];
            matmul_grouped(&groups, &mut s.mm, outs);
        } else {
            matmul_prepared(&wq, &mut s.mm, &mut s.q[..n * qd]);
            matmul_prepared(&wk, &mut s.mm, &mut s.k[..n * kd]);
            matmul_prepared(&wv, &mut s.mm, &mut s.v[..n * vd]);
        }
        add_bias_rows(&mut s.q[..n * qd], layer.bq.as_deref());
        add_bias_rows(&mut s.k[..n * kd], layer.bk.as_deref());
        add_bias_rows(&mut s.v[..n * vd], layer.bv.as_deref());
        // Per head or over the whole projection: the weight's length says which.
        if let (Some(qn), Some(kn)) = (&layer.q_norm, &layer.k_norm) {
            for part in s.q[..n * qd].chunks_exact_mut(qn.len()) {
                rms_norm_inplace(part, qn, cfg.norm_eps);
            }
            for part in s.k[..n * kd].chunks_exact_mut(kn.len()) {
                rms_norm_inplace(part, kn, cfg.norm_eps);
            }
        }
        tr.tensor(TracePoint::layer("Qcur_normed", il), &s.q[..n * qd], n);
        tr.tensor(TracePoint::layer("Kcur_normed", il), &s.k[..n * kd], n);
        tr.tensor(TracePoint::layer("Vcur", il), &s.v[..n * vd], n);
        if cfg.n_rot > 0 && layer.rope {
            if layer.rope_base != self.rope_base_of_table {
                for (t, pos) in self.batch.positions().enumerate() {
                    rope_table_with_factors(
                        pos,
                        cfg.n_rot,
                        layer.rope_base,
                        cfg.rope_freq_scale,
                        self.spec.rope_freqs.as_deref(),
                        &mut s.rope[t * cfg.n_rot..(t + 1) * cfg.n_rot],
                    );
                }
                self.rope_base_of_table = layer.rope_base;
            }
            for t in 0..n {
                let table = &s.rope[t * cfg.n_rot..(t + 1) * cfg.n_rot];
                let (q, k) = (
                    &mut s.q[t * qd..(t + 1) * qd],
                    &mut s.k[t * kd..(t + 1) * kd],
                );
                rope_apply(q, cfg.head_dim, cfg.n_rot, cfg.rope_style, table);
                rope_apply(k, cfg.head_dim, cfg.n_rot, cfg.rope_style, table);
            }
        }
        tr.tensor(TracePoint::layer("Qcur", il), &s.q[..n * qd], n);
        if cfg.scale_query {
            // In f32 before attention, as llama.cpp's graph scales it (see the field).
            s.q[..n * qd].iter_mut().for_each(|v| *v *= cfg.attn_scale);
        }

        let Batch { rows, starts, .. } = self.batch;
        let mut t0 = 0;
        for (r, &pos0) in rows.iter().zip(starts) {
            let t1 = t0 + r.tokens.len();
            self.kv.write_rows(
                r.seq,
                il,
                pos0,
                &s.k[t0 * kd..t1 * kd],
                &s.v[t0 * vd..t1 * vd],
            )?;
            t0 = t1;
        }
        // The per-sequence descriptors go in a list kept across layers and passes.
        let mut seqs = recycle(std::mem::take(&mut s.seqs));
        let mut t0 = 0;
        for (r, &pos0) in rows.iter().zip(starts) {
            let m = r.tokens.len();
            let kv = self.kv.layer_view(r.seq, il)?;
            // The prompt rows first, then the rest, each with its own arithmetic.
            let p = r.prompt_rows.min(m);
            for (a, b, prompt) in [(0, p, true), (p, m, false)] {
                if a < b {
                    seqs.push(SeqAttn {
                        shape: AttnShape {
                            pos0: pos0 + a,
                            n_tokens: b - a,
                            window: layer.sliding_window,
                        },
                        q: &s.q[(t0 + a) * qd..(t0 + b) * qd],
                        kv,
                        prompt,
                    });
                }
            }
            t0 += m;
        }
        let result = attention_batch(cfg, &seqs, &mut s.attn, &mut s.att[..n * hv]);
        s.seqs = recycle(seqs);
        result?;
        tr.tensor(TracePoint::layer("kqv_out", il), &s.att[..n * hv], n);

        s.mm.prepare(&s.att[..n * hv], n, hv);
        matmul_prepared(&store.view(&layer.wo)?, &mut s.mm, &mut s.o[..n * d]);
        add_bias_rows(&mut s.o[..n * d], layer.bo.as_deref());
        if let Some(pn) = &layer.post_attn_norm {
            for row in s.o[..n * d].chunks_exact_mut(d) {
                rms_norm_inplace(row, pn, cfg.norm_eps);
            }
        }
        tr.tensor(TracePoint::layer("attn_post_norm", il), &s.o[..n * d], n);
        if !cfg.parallel_residual {
            scale_rows(&mut s.o[..n * d], self.spec.residual_scale);
            add_inplace(&mut s.x[..n * d], &s.o[..n * d]);
            tr.tensor(TracePoint::layer("sa_out", il), &s.x[..n * d], n);
        }
        Ok(())
    }

    /// The feed-forward block of layer `il`: norm (sequential blocks; a parallel block's
    /// input is the attention norm's output, still in `s.h`), the feed-forward network
    /// itself, post-norm, and the residual add (for parallel blocks, attention's and the
    /// feed-forward's outputs together).
    fn ffn_block(&mut self, il: usize, layer: &LayerSpec) -> Result<(), ModelError> {
        match &layer.ffn_norm {
            Some(norm) => self.norm_rows(norm),
            None if !self.cfg.parallel_residual => self.copy_rows(),
            None => {}
        }
        match &layer.ffn {
            FfnSpec::Dense(ffn) => self.dense_ffn(il, ffn)?,
            FfnSpec::Moe(moe) => {
                let (cfg, n) = (self.cfg, self.batch.n);
                let d = cfg.n_embd;
                let s = &mut *self.s;
                let views = moe.layer.views(self.store);
                crate::moe::forward(
                    &views,
                    &moe.cfg,
                    cfg.activation,
                    &s.h[..n * d],
                    n,
                    d,
                    &mut s.o[..n * d],
                    &mut s.moe,
                )?;
                if cfg.parallel_residual {
                    s.h[..n * d].copy_from_slice(&s.o[..n * d]);
                }
                self.trace
                    .tensor(TracePoint::layer("ffn_moe_out", il), &s.o[..n * d], n);
            }
        }
        let (cfg, n) = (self.cfg, self.batch.n);
        let d = cfg.n_embd;
        let s = &mut *self.s;
        let out = if cfg.parallel_residual {
            &mut s.h[..n * d]
        } else {
            &mut s.o[..n * d]
        };
        if let Some(pn) = &layer.post_ffn_norm {
            for row in out.chunks_exact_mut(d) {
                rms_norm_inplace(row, pn, cfg.norm_eps);
            }
        }
        self.trace
            .tensor(TracePoint::layer("ffn_post_norm", il), out, n);
        if cfg.parallel_residual {
            // (attention + ffn) + residual, in llama.cpp's order.
            add_inplace(&mut s.o[..n * d], &s.h[..n * d]);
        } else {
            scale_rows(&mut s.o[..n * d], self.spec.residual_scale);
        }
        add_inplace(&mut s.x[..n * d], &s.o[..n * d]);
        self.trace
            .tensor(TracePoint::layer("l_out", il), &s.x[..n * d], n);
        Ok(())
    }

    /// A dense feed-forward network over `s.h`: `down(act(gate) · up)` when gated,
    /// `down(act(up))` when not, with biases where the model has them. The output goes to
    /// `s.h` for parallel blocks and to `s.o` otherwise.
    fn dense_ffn(&mut self, il: usize, layer: &DenseFfn) -> Result<(), ModelError> {
        let (cfg, store, n) = (self.cfg, self.store, self.batch.n);
        let (d, ff) = (cfg.n_embd, cfg.n_ff);
        let tr = &mut *self.trace;
        let s = &mut *self.s;
        s.mm.prepare(&s.h[..n * d], n, d);
        let w_up = store.view(&layer.w_up)?;
        let w_gate = layer.w_gate.as_ref().map(|w| store.view(w)).transpose()?;
        match w_gate {
            // Gate and up in one parallel region (see `FUSED_MAX_TOKENS`).
            Some(w_gate) if n <= FUSED_MAX_TOKENS => {
                let groups = [fused(w_up, n, 0), fused(w_gate, n, 1)];
                let outs = [&mut s.up[..n * ff], &mut s.gate[..n * ff]];
                matmul_grouped(&groups, &mut s.mm, outs);
            }
            Some(w_gate) => {
                matmul_prepared(&w_up, &mut s.mm, &mut s.up[..n * ff]);
                matmul_prepared(&w_gate, &mut s.mm, &mut s.gate[..n * ff]);
            }
            None => matmul_prepared(&w_up, &mut s.mm, &mut s.up[..n * ff]),
        }
        add_bias_rows(&mut s.up[..n * ff], layer.b_up.as_deref());
        tr.tensor(TracePoint::layer("ffn_up", il), &s.up[..n * ff], n);
        let act = match &layer.w_gate {
            Some(_) => {
                tr.tensor(TracePoint::layer("ffn_gate", il), &s.gate[..n * ff], n);
                gated_activation(&mut s.gate[..n * ff], &s.up[..n * ff], cfg.activation);
                &s.gate[..n * ff]
            }
            None => {
                activation_inplace(&mut s.up[..n * ff], cfg.activation);
                &s.up[..n * ff]
            }
        };
        tr.tensor(TracePoint::layer("ffn_act", il), act, n);
        s.mm.prepare(act, n, ff);
        let out = if cfg.parallel_residual {
            &mut s.h[..n * d]
        } else {
            &mut s.o[..n * d]
        };
        matmul_prepared(&store.view(&layer.w_down)?, &mut s.mm, out);
        add_bias_rows(out, layer.b_down.as_deref());
        Ok(())
    }

    /// The output head: final norm of the tokens whose logits `out` asks for, the output
    /// projection (bias, soft-cap) into `s.logits`, packed as `out` says.
    fn head(&mut self, out: OutRows) -> Result<(), ModelError> {
        let (cfg, spec, n) = (self.cfg, self.spec, self.batch.n);
        let (d, vocab) = (cfg.n_embd, cfg.vocab_size);
        let s = &mut *self.s;
        let output = self.store.view(&spec.output)?;
        let produced = match out {
            OutRows::Skip => return Ok(()),
            OutRows::HiddenFrom(r) => {
                self.norm_rows(&spec.output_norm);
                let s = &mut *self.s;
                s.hidden[r * d..(r + n) * d].copy_from_slice(&s.h[..n * d]);
                return Ok(());
            }
            OutRows::LastOfRows => {
                // The last token of each row that asks, packed.
                let mut k = 0;
                let mut end = 0;
                for r in self.batch.rows {
                    end += r.tokens.len();
                    if r.logits {
                        let last = &s.x[(end - 1) * d..end * d];
                        spec.output_norm.apply(
                            cfg.norm,
                            cfg.norm_eps,
                            last,
                            &mut s.h[k * d..(k + 1) * d],
                        );
                        k += 1;
                    }
                }
                if k == 0 {
                    return Ok(());
                }
                if s.logits.len() < k * vocab {
                    s.logits.resize(k * vocab, 0.0);
                }
                s.mm.prepare(&s.h[..k * d], k, d);
                matmul_prepared(&output, &mut s.mm, &mut s.logits[..k * vocab]);
                0..k * vocab
            }
            OutRows::AllOfRows => {
                // Every token of each row that asks, packed.
                let mut k = 0;
                let mut start = 0;
                for r in self.batch.rows {
                    let end = start + r.tokens.len();
                    if r.logits {
                        for t in start..end {
                            spec.output_norm.apply(
                                cfg.norm,
                                cfg.norm_eps,
                                &s.x[t * d..(t + 1) * d],
                                &mut s.h[k * d..(k + 1) * d],
                            );
                            k += 1;
                        }
                    }
                    start = end;
                }
                if k == 0 {
                    return Ok(());
                }
                if s.logits.len() < k * vocab {
                    s.logits.resize(k * vocab, 0.0);
                }
                s.mm.prepare(&s.h[..k * d], k, d);
                matmul_prepared(&output, &mut s.mm, &mut s.logits[..k * vocab]);
                0..k * vocab
            }
            OutRows::AllFrom(r) => {
                self.norm_rows(&spec.output_norm);
                let s = &mut *self.s;
                s.mm.prepare(&s.h[..n * d], n, d);
                matmul_prepared(
                    &output,
                    &mut s.mm,
                    &mut s.logits[r * vocab..(r + n) * vocab],
                );
                r * vocab..(r + n) * vocab
            }
        };
        let logits = &mut self.s.logits[produced];
        add_bias_rows(logits, spec.output_bias.as_deref());
        if let Some(div) = spec.logit_scale {
            logits.iter_mut().for_each(|l| *l /= div);
        }
        if let Some(cap) = cfg.final_logit_softcap {
            softcap_inplace(logits, cap);
        }
        Ok(())
    }
}

/// An empty list of attention descriptors with `v`'s allocation, for any lifetime: the
/// descriptors borrow one layer's buffers, the allocation is kept for every layer.
fn recycle<'b>(mut v: Vec<SeqAttn<'_>>) -> Vec<SeqAttn<'b>> {
    v.clear();
    // Collecting an emptied vector's iterator into one of a same-layout type reuses its
    // allocation.
    v.into_iter()
        .map(|_| unreachable!("the vector is empty"))
        .collect()
}

/// Multiplies `x` by `scale`, if there is one.
fn scale_rows(x: &mut [f32], scale: Option<f32>) {
    if let Some(m) = scale {
        x.iter_mut().for_each(|v| *v *= m);
    }
}

/// Adds `bias` to every row of `x` (rows of `bias.len()`), if there is a bias.
fn add_bias_rows(x: &mut [f32], bias: Option<&[f32]>) {
    if let Some(b) = bias {
        for row in x.chunks_exact_mut(b.len()) {
            add_inplace(row, b);
        }
    }
}
