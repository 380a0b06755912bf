//! Mixture-of-experts feed-forward blocks (Mixtral, OLMoE, Qwen2-MoE, Qwen3-MoE): a router
//! picks `k` of a layer's experts for each token, and the token's output is the weighted sum
//! of those experts' gated FFNs (plus, for Qwen2-MoE, a sigmoid-gated shared expert).
//!
//! **Layers.** [`config`] reads the hyper-parameters from GGUF metadata; [`router`] turns
//! one token's router logits into its experts and weights (llama.cpp's order of
//! operations); this module binds a layer's tensors ([`MoeLayer`]) and runs the block over a
//! batch ([`forward`]).
//!
//! **Grouped by expert.** A step routes every token, then groups the (token, slot) pairs by
//! expert: each expert that any token chose runs one matmul per projection over all of its
//! tokens' gathered activations, so its weights are read once per step however many tokens
//! chose it; an expert nobody chose is never read (a decode step reads `k` experts).
//!
//! **Batch invariance.** A token's output is the same, bit for bit, alone or in any batch:
//! the router and expert matmuls compute each output element with one dot kernel call
//! whatever the number of rows (kiln-quant's guarantee), and the weighted outputs are summed
//! per token in slot order (best expert first), never in the order experts were processed:
//! `out = w₀·y₀; out += w₁·y₁; …`, the products rounded before each add as llama.cpp's
//! `ggml_mul` then chain of `ggml_add` does.
//!
//! **Scratch.** [`MoeScratch`] grows to the largest batch seen and is reused; a step after
//! warm-up allocates nothing.

pub mod config;
pub mod router;
#[cfg(test)]
mod tests;

use kiln_quant::{
    GATHER_ZERO, GROUP_ROW_ALIGN, MatmulGroup, MatmulScratch, QMatrix, group_starts_aligned,
    matmul_grouped, matmul_prepared,
};

use crate::ModelError;
use crate::blocks::act::{activation_inplace, gated_activation, silu};
use crate::config::Activation;
use crate::weights::{ExpertMatrices, SourceKind, Weight, WeightStore};

use config::MoeConfig;

/// One of an expert's three projections.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Proj {
    /// `n_embd → n_ff_exp`, activated.
    Gate,
    /// `n_embd → n_ff_exp`.
    Up,
    /// `n_ff_exp → n_embd`.
    Down,
}

/// The shared expert's tensors.
pub(crate) struct SharedExpert {
    pub up: Weight,
    pub gate: Weight,
    pub down: Weight,
    /// One row of `n_embd` (`ffn_gate_inp_shexp`): the token's shared-expert output is
    /// scaled by `sigmoid(x · row)`.
    pub gate_inp: Option<Weight>,
}

/// The tensors of one layer's mixture-of-experts block.
pub(crate) struct MoeLayer {
    /// `ffn_gate_inp`: `n_expert` rows of `n_embd`.
    pub router: Weight,
    /// `None` for ungated experts (`act(up)`).
    pub gate: Option<ExpertMatrices>,
    pub up: ExpertMatrices,
    pub down: ExpertMatrices,
    pub shared: Option<SharedExpert>,
}

impl MoeLayer {
    /// Binds layer `il`'s tensors by their GGUF names (`blk.{il}.ffn_gate_inp.weight`,
    /// `ffn_{gate,up,down}_exps`, `ffn_{gate,up,down}_shexp`, `ffn_gate_inp_shexp`),
    /// checking every shape against `cfg` and `n_embd`.
    pub fn bind(
        store: &WeightStore,
        il: usize,
        cfg: &MoeConfig,
        n_embd: usize,
    ) -> Result<MoeLayer, ModelError> {
        let name = |t: &str| format!("blk.{il}.{t}.weight");
        let (e, f) = (cfg.n_expert, cfg.n_ff_exp);
        let shared = match &cfg.shared {
            None => None,
            Some(sh) => Some(SharedExpert {
                up: store.matrix(&name("ffn_up_shexp"), n_embd, sh.n_ff)?,
                gate: store.matrix(&name("ffn_gate_shexp"), n_embd, sh.n_ff)?,
                down: store.matrix(&name("ffn_down_shexp"), sh.n_ff, n_embd)?,
                gate_inp: if sh.sigmoid_gated {
                    Some(store.matrix(&name("ffn_gate_inp_shexp"), n_embd, 1)?)
                } else {
                    None
                },
            }),
        };
        let gate = if store.has(&name("ffn_gate_exps")) || store.has(&expert_name(il, "gate", 0)) {
            Some(experts(store, il, "gate", n_embd, f, e)?)
        } else {
            None
        };
        Ok(MoeLayer {
            router: store.matrix(&name("ffn_gate_inp"), n_embd, e)?,
            gate,
            up: experts(store, il, "up", n_embd, f, e)?,
            down: experts(store, il, "down", f, n_embd, e)?,
            shared,
        })
    }

    /// Weight bytes a step reads when it runs `n_run` of the experts (a decode step runs
    /// `n_expert_used`): the router, those experts' matrices, and the shared expert.
    pub fn bytes_read(&self, n_run: usize) -> u64 {
        let bytes = |w: &Weight| {
            w.ty.row_bytes(w.cols as u64)
                .map_or(0, |rb| rb.saturating_mul(w.rows as u64))
        };
        let expert = [self.gate.as_ref(), Some(&self.up), Some(&self.down)]
            .into_iter()
            .flatten()
            .filter_map(|m| m.get(0))
            .map(bytes)
            .sum::<u64>();
        let shared = self.shared.as_ref().map_or(0, |sh| {
            [
                Some(&sh.gate),
                Some(&sh.up),
                Some(&sh.down),
                sh.gate_inp.as_ref(),
            ]
            .into_iter()
            .flatten()
            .map(bytes)
            .sum::<u64>()
        });
        bytes(&self.router) + expert * n_run as u64 + shared
    }

    /// This layer's kernel views in `store`.
    pub fn views<'a>(&'a self, store: &'a WeightStore) -> BoundMoe<'a> {
        BoundMoe { store, layer: self }
    }
}

/// The name of expert `e`'s `proj` matrix of layer `il` when experts are stored one matrix
/// each: `blk.{il}.ffn_{proj}.{e}.weight` (older llama.cpp Mixtral files; the name a
/// Hugging Face checkpoint's `experts.{e}.{proj}_proj.weight` is bound by).
pub(crate) fn expert_name(il: usize, proj: &str, e: usize) -> String {
    format!("blk.{il}.ffn_{proj}.{e}.weight")
}

/// Layer `il`'s `proj` experts (`n_expert` matrices of `rows` rows of `cols`): views of the
/// 3-D `blk.{il}.ffn_{proj}_exps.weight` when the source has it, else the per-expert
/// matrices of [`expert_name`]. Either way nothing is copied.
fn experts(
    store: &WeightStore,
    il: usize,
    proj: &str,
    cols: usize,
    rows: usize,
    n_expert: usize,
) -> Result<ExpertMatrices, ModelError> {
    let stacked = format!("blk.{il}.ffn_{proj}_exps.weight");
    // A GGUF file with neither layout is refused naming the 3-D tensor, the usual one.
    if store.has(&stacked)
        || (store.kind() == SourceKind::Gguf && !store.has(&expert_name(il, proj, 0)))
    {
        return store.experts(&stacked, cols, rows, n_expert);
    }
    let each = (0..n_expert)
        .map(|e| store.matrix(&expert_name(il, proj, e), cols, rows))
        .collect::<Result<Vec<_>, _>>()?;
    ExpertMatrices::from_matrices(each)
}

/// Where [`forward`] gets its matrices: resolved on use, so a step touches exactly the
/// experts it runs (and a test can watch which).
pub(crate) trait MoeWeights {
    /// The router, `n_expert` rows of `n_embd`.
    fn router(&self) -> Result<QMatrix<'_>, ModelError>;
    /// Expert `e`'s projection; `None` for the gate of ungated experts.
    fn expert(&self, proj: Proj, e: usize) -> Result<Option<QMatrix<'_>>, ModelError>;
    /// The shared expert's projection, if there is a shared expert.
    fn shared(&self, proj: Proj) -> Result<Option<QMatrix<'_>>, ModelError>;
    /// The shared expert's gate row (`ffn_gate_inp_shexp`), if it has one.
    fn shared_gate_inp(&self) -> Result<Option<QMatrix<'_>>, ModelError>;
}

/// A [`MoeLayer`]'s tensors in the store that maps them.
pub(crate) struct BoundMoe<'a> {
    store: &'a WeightStore,
    layer: &'a MoeLayer,
}

impl BoundMoe<'_> {
    fn mats(&self, proj: Proj) -> Option<&ExpertMatrices> {
        match proj {
            Proj::Gate => self.layer.gate.as_ref(),
            Proj::Up => Some(&self.layer.up),
            Proj::Down => Some(&self.layer.down),
        }
    }
}

impl MoeWeights for BoundMoe<'_> {
    fn router(&self) -> Result<QMatrix<'_>, ModelError> {
        self.store.view(&self.layer.router)
    }

    fn expert(&self, proj: Proj, e: usize) -> Result<Option<QMatrix<'_>>, ModelError> {
        let Some(m) = self.mats(proj) else {
            return Ok(None);
        };
        let w = m.get(e).ok_or_else(|| {
            ModelError::InvalidConfig(format!("expert {e} of {} does not exist", m.n_experts()))
        })?;
        self.store.view(w).map(Some)
    }

    fn shared(&self, proj: Proj) -> Result<Option<QMatrix<'_>>, ModelError> {
        let Some(sh) = &self.layer.shared else {
            return Ok(None);
        };
        let w = match proj {
            Proj::Gate => &sh.gate,
            Proj::Up => &sh.up,
            Proj::Down => &sh.down,
        };
        self.store.view(w).map(Some)
    }

    fn shared_gate_inp(&self) -> Result<Option<QMatrix<'_>>, ModelError> {
        match self.layer.shared.as_ref().and_then(|s| s.gate_inp.as_ref()) {
            Some(w) => self.store.view(w).map(Some),
            None => Ok(None),
        }
    }
}

/// Reusable buffers of [`forward`]; they grow to the largest batch and stay.
#[derive(Default)]
pub(crate) struct MoeScratch {
    mm: MatmulScratch,
    /// Per token, the router logits, then the gated probabilities (`n × n_expert`).
    probs: Vec<f32>,
    /// Per token, its experts best first (`n × k`).
    sel: Vec<u32>,
    /// Per token, the weights of its experts (`n × k`).
    weights: Vec<f32>,
    /// Per (token, slot), its row among the grouped rows (`n × k`).
    pos: Vec<u32>,
    /// Per expert, the first grouped row of its tokens; then the next free row while
    /// grouping (`n_expert + 1`).
    start: Vec<u32>,
    cursor: Vec<u32>,
    /// The experts run in the last step, ascending.
    run: Vec<u32>,
    /// The grouped matmuls of the last step: gate and up, then down (kept for their
    /// allocation; see [`MatmulGroup::recycle`]).
    gate_up: Vec<MatmulGroup<'static>>,
    down: Vec<MatmulGroup<'static>>,
    /// Per grouped row, the token whose activations it holds ([`GATHER_ZERO`] for the rows
    /// skipped to align a group): expert by expert, each expert's tokens in order.
    src: Vec<u32>,
    /// Grouped gate and up outputs (`n·k × n_ff_exp`).
    gate: Vec<f32>,
    up: Vec<f32>,
    /// Grouped expert outputs (`n·k × n_embd`).
    yg: Vec<f32>,
    /// Shared expert: gate, up (`n × n_ff_shexp`), output (`n × n_embd`), gate logit (`n`).
    sh_gate: Vec<f32>,
    sh_up: Vec<f32>,
    sh_out: Vec<f32>,
    sh_logit: Vec<f32>,
}

impl MoeScratch {
    /// The experts the last [`forward`] ran, ascending (each read once).
    #[cfg(test)]
    pub fn experts_run(&self) -> &[u32] {
        &self.run
    }

    /// The experts and weights the last [`forward`] gave token `t`, best first.
    #[cfg(test)]
    pub fn routing(&self, t: usize, k: usize) -> (&[u32], &[f32]) {
        (
            &self.sel[t * k..(t + 1) * k],
            &self.weights[t * k..(t + 1) * k],
        )
    }
}

fn grow<T: Default + Clone>(v: &mut Vec<T>, n: usize) {
    if v.len() < n {
        v.resize(n, T::default());
    }
}

/// The mixture-of-experts block over `n` tokens: `out[t]` (`n_embd` values per token, `x`
/// and `out` both `n × n_embd`) receives `Σ_j w_tj · expert_{e_tj}(x_t)` summed in slot
/// order, plus the shared expert's output when the layer has one. `act` is the experts'
/// activation (`act(gate) · up`, or `act(up)` for ungated experts).
///
/// # Panics
/// If `x` or `out` is not `n × n_embd`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn forward(
    w: &impl MoeWeights,
    cfg: &MoeConfig,
    act: Activation,
    x: &[f32],
    n: usize,
    n_embd: usize,
    out: &mut [f32],
    s: &mut MoeScratch,
) -> Result<(), ModelError> {
    let d = n_embd;
    assert_eq!(x.len(), n * d, "moe::forward: x is not n x n_embd");
    assert_eq!(out.len(), n * d, "moe::forward: out is not n x n_embd");
    let (ne, k, f) = (cfg.n_expert, cfg.n_expert_used, cfg.n_ff_exp);
    s.run.clear();
    if n == 0 {
        return Ok(());
    }

    // Router, and the shared expert's projections of the same input.
    grow(&mut s.probs, n * ne);
    grow(&mut s.sel, n * k);
    grow(&mut s.weights, n * k);
    grow(&mut s.pos, n * k);
    s.mm.prepare(x, n, d);
    matmul_prepared(&w.router()?, &mut s.mm, &mut s.probs[..n * ne]);
    for t in 0..n {
        router::route_token(
            cfg,
            &mut s.probs[t * ne..(t + 1) * ne],
            &mut s.sel[t * k..(t + 1) * k],
            &mut s.weights[t * k..(t + 1) * k],
        );
    }
    let shared = shared_expert(w, cfg, act, n, d, s)?;

    // Group the (token, slot) pairs by expert: a counting sort, tokens ascending within
    // each expert. An expert with GROUP_ROW_ALIGN or more tokens, or six or seven, starts on
    // a multiple of it (the grouped matmul's eight-token kernels need that; see
    // `group_starts_aligned`); the rows skipped are zeros.
    s.start.clear();
    s.start.resize(ne + 1, 0);
    for &e in &s.sel[..n * k] {
        s.start[e as usize + 1] += 1;
    }
    let mut row = 0usize;
    for e in 0..ne {
        let c = s.start[e + 1] as usize;
        if group_starts_aligned(c) {
            row = row.next_multiple_of(GROUP_ROW_ALIGN);
        }
        s.start[e] = row as u32;
        row += c;
    }
    s.start[ne] = row as u32;
    let rows = row;
    s.cursor.clear();
    s.cursor.extend_from_slice(&s.start[..ne]);
    for t in 0..n {
        for j in 0..k {
            let e = s.sel[t * k + j] as usize;
            s.pos[t * k + j] = s.cursor[e];
            s.cursor[e] += 1;
        }
    }
    // `cursor[e]` is now the end of expert e's rows.
    s.run.extend(
        (0..ne)
            .filter(|&e| s.cursor[e] > s.start[e])
            .map(|e| e as u32),
    );

    // Each chosen expert's matrices, looked up once, as groups over its rows. A decode step
    // (one token) multiplies its one prepared row by every chosen expert; a batch gathers
    // each expert's tokens' rows.
    let mut gu = MatmulGroup::recycle(std::mem::take(&mut s.gate_up));
    let mut dn = MatmulGroup::recycle(std::mem::take(&mut s.down));
    for &e in &s.run {
        let e = e as usize;
        let (r0, c) = (s.start[e] as usize, (s.cursor[e] - s.start[e]) as usize);
        let missing = || ModelError::InvalidConfig(format!("expert {e} has no weights"));
        let first = if n == 1 { 0 } else { r0 };
        let group = |w, out| MatmulGroup {
            w,
            first,
            n: c,
            out,
            out_row: r0,
        };
        gu.push(group(w.expert(Proj::Up, e)?.ok_or_else(missing)?, 0));
        if let Some(g) = w.expert(Proj::Gate, e)? {
            gu.push(group(g, 1));
        }
        dn.push(MatmulGroup {
            first: r0,
            ..group(w.expert(Proj::Down, e)?.ok_or_else(missing)?, 0)
        });
    }
    let gated = gu.len() > dn.len();

    grow(&mut s.up, rows * f);
    grow(&mut s.gate, rows * f);
    grow(&mut s.yg, rows * d);
    if n > 1 {
        // Each grouped row is gathered straight into the matmul's input.
        s.src.clear();
        s.src.resize(rows, GATHER_ZERO);
        for t in 0..n {
            for j in 0..k {
                s.src[s.pos[t * k + j] as usize] = t as u32;
            }
        }
        s.mm.prepare_gathered(x, d, &s.src[..rows]);
    } else {
        // The shared expert prepared its own activations since the router's.
        s.mm.prepare(x, 1, d);
    }
    matmul_grouped(
        &gu,
        &mut s.mm,
        [&mut s.up[..rows * f], &mut s.gate[..rows * f]],
    );
    let mut end = 0;
    for &e in &s.run {
        let (r0, r1) = (s.start[e as usize] as usize, s.cursor[e as usize] as usize);
        if gated {
            s.gate[end * f..r0 * f].fill(0.0);
            gated_activation(&mut s.gate[r0 * f..r1 * f], &s.up[r0 * f..r1 * f], act);
        } else {
            s.up[end * f..r0 * f].fill(0.0);
            activation_inplace(&mut s.up[r0 * f..r1 * f], act);
        }
        end = r1;
    }
    let a = if gated { &s.gate } else { &s.up };
    s.mm.prepare(&a[..rows * f], rows, f);
    matmul_grouped(&dn, &mut s.mm, [&mut s.yg[..rows * d]]);
    s.gate_up = MatmulGroup::recycle(gu);
    s.down = MatmulGroup::recycle(dn);

    // Weighted sum per token in slot order, then the shared expert.
    for t in 0..n {
        let o = &mut out[t * d..(t + 1) * d];
        for j in 0..k {
            let wt = s.weights[t * k + j];
            let r = s.pos[t * k + j] as usize;
            let y = &s.yg[r * d..(r + 1) * d];
            if j == 0 {
                o.iter_mut().zip(y).for_each(|(o, &y)| *o = y * wt);
            } else {
                o.iter_mut().zip(y).for_each(|(o, &y)| *o += y * wt);
            }
        }
        if shared {
            let sh = &s.sh_out[t * d..(t + 1) * d];
            o.iter_mut().zip(sh).for_each(|(o, &v)| *o += v);
        }
    }
    Ok(())
}

/// Runs the shared expert on the `n` tokens prepared in `s.mm`, its output in `s.sh_out`
/// (scaled by its sigmoid gate when it has one). Returns whether there is a shared expert.
fn shared_expert(
    w: &impl MoeWeights,
    cfg: &MoeConfig,
    act: Activation,
    n: usize,
    d: usize,
    s: &mut MoeScratch,
) -> Result<bool, ModelError> {
    let (Some(sh), Some(up), Some(down)) = (cfg.shared, w.shared(Proj::Up)?, w.shared(Proj::Down)?)
    else {
        return Ok(false);
    };
    let f = sh.n_ff;
    grow(&mut s.sh_up, n * f);
    grow(&mut s.sh_gate, n * f);
    grow(&mut s.sh_out, n * d);
    grow(&mut s.sh_logit, n);
    let gate_inp = w.shared_gate_inp()?;
    if let Some(g) = &gate_inp {
        matmul_prepared(g, &mut s.mm, &mut s.sh_logit[..n]);
    }
    matmul_prepared(&up, &mut s.mm, &mut s.sh_up[..n * f]);
    let a = match w.shared(Proj::Gate)? {
        Some(g) => {
            matmul_prepared(&g, &mut s.mm, &mut s.sh_gate[..n * f]);
            gated_activation(&mut s.sh_gate[..n * f], &s.sh_up[..n * f], act);
            &s.sh_gate[..n * f]
        }
        None => {
            activation_inplace(&mut s.sh_up[..n * f], act);
            &s.sh_up[..n * f]
        }
    };
    s.mm.prepare(a, n, f);
    matmul_prepared(&down, &mut s.mm, &mut s.sh_out[..n * d]);
    if gate_inp.is_some() {
        for t in 0..n {
            // llama.cpp forms the sigmoid as silu(g) / g.
            let g = s.sh_logit[t];
            let sig = if g == 0.0 { 0.5 } else { silu(g) / g };
            s.sh_out[t * d..(t + 1) * d]
                .iter_mut()
                .for_each(|v| *v *= sig);
        }
    }
    Ok(true)
}
