use std::cell::RefCell;
use std::sync::Arc;

use kiln_format::{GgmlType, GgufFile, GgufWriter, Metadata};

use super::config::{
    Gating, MAX_EXPERTS, MOE_ARCHITECTURES, MoeConfig, MoeConfigError, MoeDefaults,
    SharedExpertConfig,
};
use super::router::{WEIGHT_SUM_FLOOR, route_token, top_k};
use super::*;
use crate::LoadOptions;

// ---------------------------------------------------------------------------------------
// Helpers: a deterministic generator, quantized random experts in an in-memory GGUF, and a
// naive reference computed in f64 from the dequantized weights.

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [-1, 1).
    fn unit(&mut self) -> f32 {
        ((self.next() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }

    fn vec(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| self.unit() * scale).collect()
    }
}

fn quantize(ty: GgmlType, cols: usize, data: &[f32]) -> Vec<u8> {
    let rb = cols / ty.block_elems() * ty.block_bytes();
    let mut out = vec![0u8; data.len() / cols * rb];
    for (src, dst) in data.chunks(cols).zip(out.chunks_mut(rb)) {
        kiln_quant::quantize_row(ty, src, dst).expect("quantize");
    }
    out
}

fn dequantize(ty: GgmlType, cols: usize, bytes: &[u8]) -> Vec<f32> {
    let rb = cols / ty.block_elems() * ty.block_bytes();
    let mut out = vec![0f32; bytes.len() / rb * cols];
    for (src, dst) in bytes.chunks(rb).zip(out.chunks_mut(cols)) {
        kiln_quant::dequantize_row(ty, src, dst).expect("dequantize");
    }
    out
}

/// Dequantized weights of one layer, for the reference.
struct RefLayer {
    router: Vec<f32>,
    gate: Vec<Vec<f32>>,
    up: Vec<Vec<f32>>,
    down: Vec<Vec<f32>>,
    shared: Option<RefShared>,
}

struct RefShared {
    gate: Vec<f32>,
    up: Vec<f32>,
    down: Vec<f32>,
    gate_row: Vec<f32>,
}

struct Fixture {
    store: WeightStore,
    layer: MoeLayer,
    cfg: MoeConfig,
    d: usize,
    reference: RefLayer,
}

/// A one-layer model file holding a random MoE block: router in F32, experts (and shared
/// expert) in `ty`.
fn fixture(ty: GgmlType, d: usize, cfg: MoeConfig, seed: u64) -> Fixture {
    let mut rng = Rng(seed);
    let (ne, f) = (cfg.n_expert, cfg.n_ff_exp);
    let mut w = GgufWriter::new();
    w.add_metadata("general.architecture", "qwen2moe")
        .expect("md");
    let router = rng.vec(ne * d, 0.5);
    w.add_tensor(
        "blk.0.ffn_gate_inp.weight",
        GgmlType::F32,
        &[d as u64, ne as u64],
        router.iter().flat_map(|v| v.to_le_bytes()).collect(),
    )
    .expect("router");
    // Each expert's rows get their own scale, so experts differ in magnitude too.
    let mut experts = |name: &str, rows: usize, cols: usize| -> Vec<Vec<f32>> {
        let mut all = Vec::new();
        let mut parts = Vec::new();
        for e in 0..ne {
            let m = rng.vec(rows * cols, 0.2 + 0.1 * e as f32);
            let q = quantize(ty, cols, &m);
            parts.push(dequantize(ty, cols, &q));
            all.extend_from_slice(&q);
        }
        w.add_tensor(
            format!("blk.0.{name}.weight"),
            ty,
            &[cols as u64, rows as u64, ne as u64],
            all,
        )
        .expect("experts");
        parts
    };
    let gate = experts("ffn_gate_exps", f, d);
    let up = experts("ffn_up_exps", f, d);
    let down = experts("ffn_down_exps", d, f);
    let shared = cfg.shared.map(|sh| {
        let mut mat = |name: &str, rows: usize, cols: usize| {
            let m = rng.vec(rows * cols, 0.3);
            let q = quantize(ty, cols, &m);
            w.add_tensor(
                format!("blk.0.{name}.weight"),
                ty,
                &[cols as u64, rows as u64],
                q.clone(),
            )
            .expect("shared");
            dequantize(ty, cols, &q)
        };
        let g = mat("ffn_gate_shexp", sh.n_ff, d);
        let u = mat("ffn_up_shexp", sh.n_ff, d);
        let dn = mat("ffn_down_shexp", d, sh.n_ff);
        let row = rng.vec(d, 0.3);
        w.add_tensor(
            "blk.0.ffn_gate_inp_shexp.weight",
            GgmlType::F32,
            &[d as u64],
            row.iter().flat_map(|v| v.to_le_bytes()).collect(),
        )
        .expect("shared gate");
        RefShared {
            gate: g,
            up: u,
            down: dn,
            gate_row: row,
        }
    });
    let file = GgufFile::from_bytes(w.to_bytes().expect("write")).expect("parse");
    let store = WeightStore::gguf(Arc::new(file), LoadOptions::default());
    let layer = MoeLayer::bind(&store, 0, &cfg, d).expect("bind");
    Fixture {
        store,
        layer,
        cfg,
        d,
        reference: RefLayer {
            router,
            gate,
            up,
            down,
            shared,
        },
    }
}

fn matvec(w: &[f32], x: &[f64]) -> Vec<f64> {
    w.chunks(x.len())
        .map(|row| row.iter().zip(x).map(|(&a, &b)| a as f64 * b).sum())
        .collect()
}

fn silu64(x: f64) -> f64 {
    x / (1.0 + (-x).exp())
}

/// The f64 routing reference: gate all experts, stable sort by probability (descending, so
/// ties keep the lower index first), take k, normalise, scale.
fn ref_route(cfg: &MoeConfig, logits: &[f64]) -> (Vec<u32>, Vec<f64>) {
    let probs: Vec<f64> = match cfg.gating {
        Gating::Softmax => {
            let m = logits.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = logits.iter().map(|l| (l - m).exp()).collect();
            let s: f64 = e.iter().sum();
            e.iter().map(|v| v / s).collect()
        }
        Gating::Sigmoid => logits.iter().map(|l| 1.0 / (1.0 + (-l).exp())).collect(),
    };
    let mut idx: Vec<u32> = (0..probs.len() as u32).collect();
    idx.sort_by(|&a, &b| probs[b as usize].total_cmp(&probs[a as usize]));
    idx.truncate(cfg.n_expert_used);
    let mut w: Vec<f64> = idx.iter().map(|&e| probs[e as usize]).collect();
    if cfg.norm_weights {
        let s: f64 = w.iter().sum::<f64>().max(WEIGHT_SUM_FLOOR as f64);
        w.iter_mut().for_each(|v| *v /= s);
    }
    if let Some(s) = cfg.weights_scale {
        w.iter_mut().for_each(|v| *v *= s as f64);
    }
    (idx, w)
}

/// `x` through a Q8_0 round trip, as the kernels convert activations for Q8_0 weights.
fn q8_0_round_trip(x: &[f64]) -> Vec<f64> {
    let x32: Vec<f32> = x.iter().map(|&v| v as f32).collect();
    let q = quantize(GgmlType::Q8_0, x.len(), &x32);
    dequantize(GgmlType::Q8_0, x.len(), &q)
        .into_iter()
        .map(f64::from)
        .collect()
}

/// One token through the reference block: its output and its experts. With `act_q8_0` the
/// expert inputs (the token, the gated products) go through Q8_0 as the kernels' do, so
/// only summation order separates the two.
fn ref_forward(fx: &Fixture, x: &[f32], act_q8_0: bool) -> (Vec<f64>, Vec<u32>) {
    let r = &fx.reference;
    let x: Vec<f64> = x.iter().map(|&v| v as f64).collect();
    let (sel, w) = ref_route(&fx.cfg, &matvec(&r.router, &x));
    let act = |v: Vec<f64>| if act_q8_0 { q8_0_round_trip(&v) } else { v };
    let xa = act(x.clone());
    let mut out = vec![0f64; fx.d];
    let ffn = |g: Option<&[f32]>, u: &[f32], dn: &[f32]| {
        let h: Vec<f64> = match g {
            Some(g) => matvec(g, &xa)
                .iter()
                .zip(matvec(u, &xa))
                .map(|(&g, u)| silu64(g) * u)
                .collect(),
            None => matvec(u, &xa).into_iter().map(silu64).collect(),
        };
        matvec(dn, &act(h))
    };
    let gated = fx.layer.gate.is_some();
    for (&e, &wt) in sel.iter().zip(&w) {
        let e = e as usize;
        let g = gated.then_some(r.gate[e].as_slice());
        for (o, y) in out.iter_mut().zip(ffn(g, &r.up[e], &r.down[e])) {
            *o += wt * y;
        }
    }
    if let Some(RefShared {
        gate: g,
        up: u,
        down: dn,
        gate_row: row,
    }) = &r.shared
    {
        let logit: f64 = row.iter().zip(&x).map(|(&a, &b)| a as f64 * b).sum();
        let sig = match fx.cfg.shared {
            Some(sh) if sh.sigmoid_gated => 1.0 / (1.0 + (-logit).exp()),
            _ => 1.0,
        };
        for (o, y) in out.iter_mut().zip(ffn(Some(g), u, dn)) {
            *o += sig * y;
        }
    }
    (out, sel)
}

fn run(fx: &Fixture, x: &[f32], n: usize, s: &mut MoeScratch) -> Vec<f32> {
    let mut out = vec![f32::NAN; n * fx.d];
    forward(
        &fx.layer.views(&fx.store),
        &fx.cfg,
        Activation::Silu,
        x,
        n,
        fx.d,
        &mut out,
        s,
    )
    .expect("forward");
    out
}

fn moe_cfg(n_expert: usize, k: usize, f: usize) -> MoeConfig {
    MoeConfig {
        n_expert,
        n_expert_used: k,
        n_ff_exp: f,
        gating: Gating::Softmax,
        norm_weights: true,
        weights_scale: None,
        shared: None,
    }
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

// ---------------------------------------------------------------------------------------
// Router.

#[test]
fn routing_matches_an_f64_reference_for_every_gating_and_weighting() {
    let mut rng = Rng(7);
    let variants = [
        (Gating::Softmax, true, None),
        (Gating::Softmax, false, None),
        (Gating::Sigmoid, true, Some(2.5f32)),
        (Gating::Sigmoid, false, None),
    ];
    for (gating, norm, scale) in variants {
        let cfg = MoeConfig {
            gating,
            norm_weights: norm,
            weights_scale: scale,
            ..moe_cfg(64, 8, 16)
        };
        for _ in 0..50 {
            let logits = rng.vec(64, 4.0);
            let mut probs = logits.clone();
            let (mut sel, mut w) = (vec![0u32; 8], vec![0f32; 8]);
            route_token(&cfg, &mut probs, &mut sel, &mut w);
            let l64: Vec<f64> = logits.iter().map(|&v| v as f64).collect();
            let (rs, rw) = ref_route(&cfg, &l64);
            assert_eq!(
                sel, rs,
                "{gating:?} norm {norm}: selected experts, best first"
            );
            for (a, b) in w.iter().zip(&rw) {
                assert!(
                    ((*a as f64) - b).abs() <= 1e-6 * b.abs().max(1e-3),
                    "{gating:?} norm {norm}: weight {a} vs reference {b}"
                );
            }
            if norm {
                let s: f64 = w.iter().map(|&v| v as f64).sum();
                let want = scale.unwrap_or(1.0) as f64;
                assert!((s - want).abs() < 1e-5, "normalised weights sum to {s}");
            }
        }
    }
}

#[test]
fn ties_go_to_the_lower_expert_index_in_selection_and_slot_order() {
    let p = [1.0, 3.0, 3.0, 2.0, 3.0, 0.5];
    let mut out = [0u32; 2];
    top_k(&p, &mut out);
    assert_eq!(out, [1, 2]);
    let mut out = [0u32; 4];
    top_k(&p, &mut out);
    assert_eq!(out, [1, 2, 4, 3]);
    let mut out = [0u32; 3];
    top_k(&[0.25; 8], &mut out);
    assert_eq!(out, [0, 1, 2]);
}

#[test]
fn top_k_equals_a_stable_descending_sort_with_many_ties() {
    let mut rng = Rng(11);
    for n in [1usize, 2, 8, 60, 128] {
        for k in [1usize, 2, 4, 8].into_iter().filter(|&k| k <= n) {
            for _ in 0..20 {
                // Few distinct values, so ties are everywhere.
                let p: Vec<f32> = (0..n).map(|_| (rng.next() % 5) as f32).collect();
                let mut want: Vec<u32> = (0..n as u32).collect();
                want.sort_by(|&a, &b| p[b as usize].total_cmp(&p[a as usize]));
                let mut got = vec![0u32; k];
                top_k(&p, &mut got);
                assert_eq!(got, want[..k], "n {n} k {k} p {p:?}");
            }
        }
    }
}

#[test]
fn a_vanishing_weight_sum_is_clamped_before_normalising() {
    let cfg = MoeConfig {
        gating: Gating::Sigmoid,
        ..moe_cfg(4, 2, 16)
    };
    let mut probs = vec![-40.0f32; 4];
    let (mut sel, mut w) = ([0u32; 2], [0f32; 2]);
    route_token(&cfg, &mut probs, &mut sel, &mut w);
    let p = 1.0 / (1.0 + 40f32.exp());
    assert_eq!(sel, [0, 1]);
    assert_eq!(w, [p / WEIGHT_SUM_FLOOR; 2]);
}

// ---------------------------------------------------------------------------------------
// The block.

fn assert_close_to_reference(fx: &Fixture, x: &[f32], n: usize, act_q8_0: bool, tol: f64) {
    let mut s = MoeScratch::default();
    let out = run(fx, x, n, &mut s);
    let k = fx.cfg.n_expert_used;
    for t in 0..n {
        let (want, sel) = ref_forward(fx, &x[t * fx.d..(t + 1) * fx.d], act_q8_0);
        assert_eq!(s.routing(t, k).0, sel, "token {t}: experts");
        let got = &out[t * fx.d..(t + 1) * fx.d];
        let err: f64 = got
            .iter()
            .zip(&want)
            .map(|(&a, b)| (a as f64 - b).powi(2))
            .sum::<f64>()
            .sqrt();
        let norm: f64 = want.iter().map(|b| b * b).sum::<f64>().sqrt();
        assert!(
            err <= tol * norm,
            "token {t}: relative error {} > {tol}",
            err / norm
        );
    }
}

#[test]
fn q8_0_experts_match_a_dequantized_f64_reference() {
    let fx = fixture(GgmlType::Q8_0, 64, moe_cfg(8, 2, 96), 1);
    let x = Rng(2).vec(12 * 64, 1.0);
    // With the activations' Q8_0 conversion in the reference too, only float summation
    // order differs.
    assert_close_to_reference(&fx, &x, 12, true, 1e-5);
    // Against exact activations, the two Q8_0 conversions (token, gated product) cost
    // about 1.5 %.
    assert_close_to_reference(&fx, &x, 12, false, 3e-2);
}

#[test]
fn q8_0_experts_with_scaled_weights_and_a_sigmoid_gated_shared_expert_match_the_reference() {
    let cfg = MoeConfig {
        norm_weights: false,
        weights_scale: Some(2.0),
        shared: Some(SharedExpertConfig {
            n_ff: 128,
            sigmoid_gated: true,
        }),
        ..moe_cfg(8, 3, 64)
    };
    let fx = fixture(GgmlType::Q8_0, 64, cfg, 15);
    let x = Rng(16).vec(9 * 64, 1.0);
    assert_close_to_reference(&fx, &x, 9, true, 1e-5);
}

#[test]
fn ungated_experts_and_an_ungated_shared_expert_match_the_reference() {
    let cfg = MoeConfig {
        shared: Some(SharedExpertConfig {
            n_ff: 128,
            sigmoid_gated: true,
        }),
        ..moe_cfg(8, 2, 96)
    };
    let mut fx = fixture(GgmlType::Q8_0, 64, cfg, 20);
    // The same tensors bound as a file without `ffn_gate_exps` and with a plain shared
    // expert would be: experts compute act(up), the shared expert's output is added as is.
    fx.layer.gate = None;
    fx.cfg.shared = Some(SharedExpertConfig {
        n_ff: 128,
        sigmoid_gated: false,
    });
    if let Some(sh) = fx.layer.shared.as_mut() {
        sh.gate_inp = None;
    }
    let x = Rng(21).vec(9 * 64, 1.0);
    assert_close_to_reference(&fx, &x, 9, true, 1e-5);
}

#[test]
fn a_file_without_expert_gates_binds_ungated_experts() {
    let fx = fixture(GgmlType::Q8_0, 64, moe_cfg(4, 2, 96), 22);
    let file = fx.store.gguf_file().expect("gguf");
    let mut w = GgufWriter::new();
    for t in file.tensors() {
        if t.name != "blk.0.ffn_gate_exps.weight" {
            w.add_tensor(t.name.clone(), t.ty, &t.dims, file.tensor_data(t).to_vec())
                .expect("copy");
        }
    }
    let file = GgufFile::from_bytes(w.to_bytes().expect("write")).expect("parse");
    let store = WeightStore::gguf(Arc::new(file), LoadOptions::default());
    let layer = MoeLayer::bind(&store, 0, &fx.cfg, 64).expect("bind");
    assert!(layer.gate.is_none());
    assert_eq!(layer.up.n_experts(), 4);
}

#[test]
fn q4_k_experts_with_a_sigmoid_gated_shared_expert_match_the_reference() {
    let cfg = MoeConfig {
        norm_weights: false,
        shared: Some(SharedExpertConfig {
            n_ff: 512,
            sigmoid_gated: true,
        }),
        ..moe_cfg(6, 3, 256)
    };
    let fx = fixture(GgmlType::Q4_K, 256, cfg, 3);
    let x = Rng(4).vec(10 * 256, 1.0);
    // Q4_K dots activations converted to Q8_K (no quantizer for it here to mirror): the
    // two conversions cost about 1.5 %.
    assert_close_to_reference(&fx, &x, 10, false, 3e-2);
}

#[test]
fn a_token_gets_the_same_output_bit_for_bit_alone_and_in_any_batch() {
    for (ty, d, f, shared) in [
        (GgmlType::Q8_0, 64, 96, false),
        (GgmlType::Q4_K, 256, 256, true),
    ] {
        let cfg = MoeConfig {
            shared: shared.then_some(SharedExpertConfig {
                n_ff: 256,
                sigmoid_gated: true,
            }),
            ..moe_cfg(8, 2, f)
        };
        let fx = fixture(ty, d, cfg, 5);
        // Forty tokens over eight experts: some experts get eight or more (the GEMM's
        // eight-token kernels), some a handful, the batch of eight one or two each.
        let n = 40;
        let x = Rng(6).vec(n * d, 1.0);
        let mut s = MoeScratch::default();
        let alone: Vec<Vec<u32>> = (0..n)
            .map(|t| bits(&run(&fx, &x[t * d..(t + 1) * d], 1, &mut s)))
            .collect();
        let all = run(&fx, &x, n, &mut s);
        for t in 0..n {
            assert_eq!(
                bits(&all[t * d..(t + 1) * d]),
                alone[t],
                "{ty:?}: token {t} of {n}"
            );
        }
        // A batch of eight mixed tokens, out of order.
        let pick = [31usize, 2, 17, 2, 39, 8, 23, 0];
        let xb: Vec<f32> = pick
            .iter()
            .flat_map(|&t| x[t * d..(t + 1) * d].iter().copied())
            .collect();
        let batch = run(&fx, &xb, pick.len(), &mut s);
        for (i, &t) in pick.iter().enumerate() {
            assert_eq!(
                bits(&batch[i * d..(i + 1) * d]),
                alone[t],
                "{ty:?}: token {t} in 8"
            );
        }
    }
}

/// Records every expert matrix [`forward`] asks for.
struct Watched<'a> {
    inner: BoundMoe<'a>,
    touched: RefCell<Vec<(Proj, usize)>>,
}

impl MoeWeights for Watched<'_> {
    fn router(&self) -> Result<QMatrix<'_>, ModelError> {
        self.inner.router()
    }
    fn expert(&self, proj: Proj, e: usize) -> Result<Option<QMatrix<'_>>, ModelError> {
        self.touched.borrow_mut().push((proj, e));
        self.inner.expert(proj, e)
    }
    fn shared(&self, proj: Proj) -> Result<Option<QMatrix<'_>>, ModelError> {
        self.inner.shared(proj)
    }
    fn shared_gate_inp(&self) -> Result<Option<QMatrix<'_>>, ModelError> {
        self.inner.shared_gate_inp()
    }
}

#[test]
fn decode_reads_only_the_selected_experts_and_a_batch_reads_each_chosen_expert_once() {
    let fx = fixture(GgmlType::Q8_0, 64, moe_cfg(16, 2, 64), 9);
    let x = Rng(10).vec(20 * 64, 1.0);
    let mut s = MoeScratch::default();
    for n in [1usize, 20] {
        let w = Watched {
            inner: fx.layer.views(&fx.store),
            touched: RefCell::new(Vec::new()),
        };
        let mut out = vec![0f32; n * 64];
        forward(
            &w,
            &fx.cfg,
            Activation::Silu,
            &x[..n * 64],
            n,
            64,
            &mut out,
            &mut s,
        )
        .expect("forward");
        let mut chosen: Vec<u32> = (0..n).flat_map(|t| s.routing(t, 2).0.to_vec()).collect();
        chosen.sort_unstable();
        chosen.dedup();
        assert_eq!(s.experts_run(), chosen, "{n} tokens: experts run");
        if n == 1 {
            assert_eq!(chosen.len(), 2, "a token routes to two experts");
        }
        let mut want: Vec<(Proj, usize)> = chosen
            .iter()
            .flat_map(|&e| [Proj::Up, Proj::Gate, Proj::Down].map(|p| (p, e as usize)))
            .collect();
        let mut got = w.touched.into_inner();
        want.sort_by_key(|&(p, e)| (e, p as u8));
        got.sort_by_key(|&(p, e)| (e, p as u8));
        assert_eq!(
            got, want,
            "{n} tokens: each chosen expert's matrices, once each"
        );
    }
}

// ---------------------------------------------------------------------------------------
// Expert tensors.

#[test]
fn bytes_read_counts_the_router_the_experts_run_and_the_shared_expert() {
    let cfg = MoeConfig {
        shared: Some(SharedExpertConfig {
            n_ff: 128,
            sigmoid_gated: true,
        }),
        ..moe_cfg(8, 2, 96)
    };
    let fx = fixture(GgmlType::Q8_0, 64, cfg, 19);
    let q8 = |rows: usize, cols: usize| (rows * cols / 32 * 34) as u64;
    let router = (8 * 64 * 4) as u64;
    let expert = 2 * q8(96, 64) + q8(64, 96);
    let shared = 2 * q8(128, 64) + q8(64, 128) + 64 * 4;
    assert_eq!(fx.layer.bytes_read(2), router + 2 * expert + shared);
    assert_eq!(fx.layer.bytes_read(8), router + 8 * expert + shared);
}

#[test]
fn expert_views_are_ranges_of_the_mapped_3d_tensor() {
    let fx = fixture(GgmlType::Q8_0, 64, moe_cfg(4, 2, 96), 12);
    let file = fx.store.gguf_file().expect("gguf");
    let info = file
        .tensor_info("blk.0.ffn_up_exps.weight")
        .expect("tensor");
    let data = file.tensor_data(info);
    let bound = fx.layer.views(&fx.store);
    let rb = 64 / 32 * 34;
    for e in 0..4 {
        let m = bound.expert(Proj::Up, e).expect("view").expect("up");
        assert_eq!((m.rows(), m.cols()), (96, 64));
        let first = m.row(0);
        assert_eq!(
            first.as_ptr(),
            data[e * 96 * rb..].as_ptr(),
            "expert {e} starts e x rows into the tensor, not a copy"
        );
    }
}

#[test]
fn an_expert_tensor_of_the_wrong_shape_reports_expected_and_found() {
    let fx = fixture(GgmlType::Q8_0, 64, moe_cfg(4, 2, 96), 13);
    match fx.store.experts("blk.0.ffn_up_exps.weight", 64, 96, 5) {
        Err(ModelError::ShapeMismatch {
            tensor,
            expected,
            found,
        }) => {
            assert_eq!(tensor, "blk.0.ffn_up_exps.weight");
            assert_eq!(expected, [64, 96, 5]);
            assert_eq!(found, [64, 96, 4]);
        }
        other => panic!("expected a shape mismatch, got {other:?}"),
    }
    assert!(matches!(
        fx.store.experts("blk.0.ffn_nothing_exps.weight", 64, 96, 4),
        Err(ModelError::MissingTensor { .. })
    ));
}

#[test]
fn float_experts_quantized_on_load_are_ranges_of_one_quantized_tensor() {
    let (ne, rows, cols) = (3usize, 8usize, 64usize);
    let m = Rng(23).vec(ne * rows * cols, 1.0);
    let mut w = GgufWriter::new();
    w.add_tensor(
        "blk.0.ffn_up_exps.weight",
        GgmlType::F32,
        &[cols as u64, rows as u64, ne as u64],
        m.iter().flat_map(|v| v.to_le_bytes()).collect(),
    )
    .expect("tensor");
    let file = GgufFile::from_bytes(w.to_bytes().expect("write")).expect("parse");
    let options = LoadOptions {
        quantize: Some(GgmlType::Q8_0),
    };
    let store = WeightStore::gguf(Arc::new(file), options);
    let experts = store
        .experts("blk.0.ffn_up_exps.weight", cols, rows, ne)
        .expect("experts");
    let mut row = vec![0f32; cols];
    for e in 0..ne {
        let v = store.view(experts.get(e).expect("expert")).expect("view");
        assert_eq!((v.ty(), v.rows(), v.cols()), (GgmlType::Q8_0, rows, cols));
        for r in 0..rows {
            v.dequantize_row(r, &mut row);
            let src = &m[(e * rows + r) * cols..][..cols];
            let want = dequantize(GgmlType::Q8_0, cols, &quantize(GgmlType::Q8_0, cols, src));
            assert_eq!(bits(&row), bits(&want), "expert {e} row {r}");
        }
    }
}

#[test]
fn separately_stored_experts_must_share_one_shape() {
    let fx = fixture(GgmlType::Q8_0, 64, moe_cfg(2, 1, 96), 14);
    let up = fx
        .store
        .matrix("blk.0.ffn_gate_inp.weight", 64, 2)
        .expect("router");
    let one = fx
        .store
        .experts("blk.0.ffn_up_exps.weight", 64, 96, 2)
        .expect("up");
    let e0 = one.get(0).expect("expert 0").clone();
    assert!(ExpertMatrices::from_matrices(vec![e0.clone(), e0.clone()]).is_ok());
    assert!(matches!(
        ExpertMatrices::from_matrices(vec![e0, up]),
        Err(ModelError::ShapeMismatch { .. })
    ));
}

// ---------------------------------------------------------------------------------------
// Configuration.

fn md(arch: &str, kv: &[(&str, kiln_format::Value)]) -> Metadata {
    let mut m = Metadata::new();
    for (k, v) in kv {
        m.set(format!("{arch}.{k}"), v.clone());
    }
    m
}

fn read(
    arch: &str,
    kv: &[(&str, kiln_format::Value)],
) -> Result<Option<MoeConfig>, MoeConfigError> {
    let d = MoeDefaults::for_arch(arch).expect("a MoE architecture");
    MoeConfig::from_metadata(&md(arch, kv), &d, 6144)
}

#[test]
fn each_architecture_reads_its_keys_and_falls_back_to_its_defaults() {
    let cfg = read(
        "qwen3moe",
        &[
            ("expert_count", 128u32.into()),
            ("expert_used_count", 8u32.into()),
            ("expert_feed_forward_length", 768u32.into()),
        ],
    )
    .expect("qwen3moe")
    .expect("experts");
    assert_eq!(
        cfg,
        MoeConfig {
            n_expert: 128,
            n_expert_used: 8,
            n_ff_exp: 768,
            gating: Gating::Softmax,
            norm_weights: true,
            weights_scale: None,
            shared: None,
        }
    );
    let cfg = read(
        "qwen3moe",
        &[
            ("expert_count", 128u32.into()),
            ("expert_used_count", 8u32.into()),
        ],
    )
    .expect("qwen3moe")
    .expect("experts");
    assert_eq!(
        cfg.n_ff_exp,
        6144 / 8,
        "feed_forward_length / expert_used_count"
    );

    let cfg = read(
        "qwen2moe",
        &[
            ("expert_count", 60u32.into()),
            ("expert_used_count", 4u32.into()),
            ("expert_feed_forward_length", 1408u32.into()),
            ("expert_shared_feed_forward_length", 5632u32.into()),
        ],
    )
    .expect("qwen2moe")
    .expect("experts");
    assert!(!cfg.norm_weights);
    assert_eq!(
        cfg.shared,
        Some(SharedExpertConfig {
            n_ff: 5632,
            sigmoid_gated: true
        })
    );

    let cfg = read(
        "olmoe",
        &[
            ("expert_count", 64u32.into()),
            ("expert_used_count", 8u32.into()),
        ],
    )
    .expect("olmoe")
    .expect("experts");
    assert_eq!(
        (cfg.n_ff_exp, cfg.norm_weights, cfg.shared),
        (6144, false, None)
    );

    assert_eq!(read("llama", &[]).expect("dense llama"), None);
    let cfg = read(
        "llama",
        &[
            ("expert_count", 8u32.into()),
            ("expert_used_count", 2u32.into()),
        ],
    )
    .expect("mixtral")
    .expect("experts");
    assert_eq!((cfg.n_ff_exp, cfg.norm_weights), (6144, true));

    let cfg = read(
        "qwen3moe",
        &[
            ("expert_count", 8u32.into()),
            ("expert_used_count", 2u32.into()),
            ("expert_gating_func", 2u32.into()),
            ("expert_weights_norm", false.into()),
            ("expert_weights_scale", 2.5f32.into()),
        ],
    )
    .expect("keys")
    .expect("experts");
    assert_eq!(
        (cfg.gating, cfg.norm_weights, cfg.weights_scale),
        (Gating::Sigmoid, false, Some(2.5))
    );
    assert!(MoeDefaults::for_arch("deepseek2").is_none());
    for arch in MOE_ARCHITECTURES {
        assert_eq!(MoeDefaults::for_arch(arch).map(|d| d.arch), Some(*arch));
    }
}

fn invalid_key(r: Result<Option<MoeConfig>, MoeConfigError>) -> String {
    match r {
        Err(MoeConfigError::InvalidValue { key, .. }) => key,
        other => panic!("expected an invalid value, got {other:?}"),
    }
}

#[test]
fn missing_and_inconsistent_keys_are_refused_by_name() {
    match read("qwen3moe", &[("expert_used_count", 8u32.into())]) {
        Err(e @ MoeConfigError::MissingKey { .. }) => {
            assert!(e.to_string().contains("'qwen3moe.expert_count'"), "{e}");
        }
        other => panic!("expected a missing key, got {other:?}"),
    }
    match read("olmoe", &[("expert_count", 64u32.into())]) {
        Err(MoeConfigError::MissingKey { key, .. }) => {
            assert_eq!(key, "olmoe.expert_used_count")
        }
        other => panic!("expected a missing key, got {other:?}"),
    }
    let count = |n: u32, k: u32| [("expert_count", n.into()), ("expert_used_count", k.into())];
    assert_eq!(
        invalid_key(read("qwen3moe", &count(8, 9))),
        "qwen3moe.expert_used_count"
    );
    assert_eq!(
        invalid_key(read("qwen3moe", &count(8, 0))),
        "qwen3moe.expert_used_count"
    );
    assert_eq!(
        invalid_key(read("qwen3moe", &count(0, 0))),
        "qwen3moe.expert_count"
    );
    assert_eq!(
        invalid_key(read("qwen3moe", &count(MAX_EXPERTS as u32 + 1, 2))),
        "qwen3moe.expert_count"
    );
    let with = |extra: (&'static str, kiln_format::Value)| {
        let mut kv = count(8, 2).to_vec();
        kv.push(extra);
        kv
    };
    assert_eq!(
        invalid_key(read(
            "qwen2moe",
            &with(("expert_shared_count", 2u32.into()))
        )),
        "qwen2moe.expert_shared_count"
    );
    assert_eq!(
        invalid_key(read(
            "qwen3moe",
            &with(("expert_shared_count", 1u32.into()))
        )),
        "qwen3moe.expert_shared_count"
    );
    assert_eq!(
        invalid_key(read(
            "qwen3moe",
            &with(("expert_weights_scale", (-1f32).into()))
        )),
        "qwen3moe.expert_weights_scale"
    );
    match read("qwen3moe", &with(("expert_gating_func", 3u32.into()))) {
        Err(e @ MoeConfigError::UnsupportedGating { .. }) => {
            let msg = e.to_string();
            assert!(
                msg.contains("qwen3moe.expert_gating_func") && msg.contains("sigmoid"),
                "{msg}"
            );
        }
        other => panic!("expected an unsupported gating function, got {other:?}"),
    }
    match read("qwen3moe", &with(("expert_count", "eight".into()))) {
        Err(e @ MoeConfigError::Metadata(_)) => {
            assert!(matches!(ModelError::from(e), ModelError::Format(_)));
        }
        other => panic!("expected a metadata type error, got {other:?}"),
    }
    let e = ModelError::from(read("qwen3moe", &count(8, 9)).expect_err("refused"));
    assert!(e.to_string().contains("qwen3moe.expert_used_count"), "{e}");
}

// ---------------------------------------------------------------------------------------
// Allocation: a step after warm-up allocates nothing.

/// Counts allocations made by the current thread (the counter is a plain thread-local cell,
/// so other tests running meanwhile do not disturb it).
struct CountingAlloc;

thread_local! {
    static THREAD_ALLOCS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

// SAFETY: forwards to the system allocator, only counting calls.
unsafe impl std::alloc::GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        THREAD_ALLOCS.with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as ours.
        unsafe { std::alloc::System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        // SAFETY: same contract as ours.
        unsafe { std::alloc::System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new: usize) -> *mut u8 {
        THREAD_ALLOCS.with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as ours.
        unsafe { std::alloc::System.realloc(ptr, layout, new) }
    }
}

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

#[test]
fn a_step_after_warm_up_allocates_nothing() {
    let cfg = MoeConfig {
        shared: Some(SharedExpertConfig {
            n_ff: 128,
            sigmoid_gated: true,
        }),
        ..moe_cfg(8, 2, 96)
    };
    let fx = fixture(GgmlType::Q8_0, 64, cfg, 17);
    let x = Rng(18).vec(24 * 64, 1.0);
    // One thread, so the whole step runs (and is counted) on the pool's thread.
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .expect("pool");
    pool.install(|| {
        let mut s = MoeScratch::default();
        let mut out = vec![0f32; 24 * 64];
        let views = fx.layer.views(&fx.store);
        let mut step = |n: usize, s: &mut MoeScratch| {
            forward(
                &views,
                &fx.cfg,
                Activation::Silu,
                &x[..n * 64],
                n,
                64,
                &mut out[..n * 64],
                s,
            )
            .expect("forward")
        };
        let before = THREAD_ALLOCS.with(|c| c.get());
        step(24, &mut s);
        let warm_up = THREAD_ALLOCS.with(|c| c.get()) - before;
        assert!(
            warm_up > 0,
            "the first step grows the scratch (and is counted)"
        );
        for n in [1usize, 24, 7, 1] {
            let before = THREAD_ALLOCS.with(|c| c.get());
            step(n, &mut s);
            let after = THREAD_ALLOCS.with(|c| c.get());
            assert_eq!(after - before, 0, "a step of {n} tokens allocated");
        }
    });
}
