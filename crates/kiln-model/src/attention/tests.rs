//! The paged attention against a plain one: contiguous K/V and the loops of the first-light
//! implementation (the arithmetic `docs/correctness.md` relies on), bit for bit, across
//! head shapes, page sizes, batch splits, windows, soft-capping, thread counts and ISAs.

use half::f16;
use kiln_kv::{KvCache, KvType};
use kiln_quant::attn::attn_kernels_for;
use kiln_quant::{GgmlType, Isa};

use super::{AttnScratch, AttnShape, attention, attention_with, chunk_keys};
use crate::kv::KvOptions;
use crate::{Model, ModelConfig};

/// A real configuration (so every field is set) with the attention shape overridden.
fn config(
    n_head: usize,
    n_head_kv: usize,
    hd: usize,
    hdv: usize,
    softcap: Option<f32>,
) -> ModelConfig {
    static BASE: std::sync::OnceLock<ModelConfig> = std::sync::OnceLock::new();
    let base = BASE.get_or_init(|| {
        let path = kiln_hub::resolve("smollm2-135m").expect("smollm2-135m must be available");
        Model::open(path).expect("model").config().clone()
    });
    let mut c = base.clone();
    c.n_head = n_head;
    c.n_head_kv = n_head_kv;
    c.head_dim = hd;
    c.head_dim_v = hdv;
    c.attn_scale = 1.0 / (hd as f32).sqrt();
    c.attn_softcap = softcap;
    c
}

/// Deterministic values of a few sizes (xorshift).
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 6.0
        })
        .collect()
}

/// Attention over contiguous f16 K/V (token-major rows of all KV heads) in llama.cpp's two
/// arithmetics (see the module docs of `attention.rs`), as [`plain_attention`] over the
/// values widened (exactly) to f32:
/// - one-row (`prompt == false`): f16 query, exact products summed in ggml's
///   `vec_dot_f16` order, f16 accumulator (one rounding per multiply-add);
/// - prompt: f32 query, sequential fused dot with the widened keys, f32 accumulator, the
///   softmax tile by tile over the chunks of a cache with `bs`-token pages.
fn plain_f16(
    cfg: &ModelConfig,
    shape: &AttnShape,
    q: &[f32],
    k: &[f16],
    v: &[f16],
    prompt: bool,
    bs: usize,
) -> Vec<f32> {
    let (nh, hd) = (cfg.n_head, cfg.head_dim);
    let group = nh / cfg.n_head_kv;
    let kd = cfg.k_dim();
    let dot = |h: usize, t: usize, j: usize| -> f32 {
        let qh = &q[t * nh * hd + h * hd..][..hd];
        let kj = &k[j * kd + (h / group) * hd..][..hd];
        if prompt {
            qh.iter()
                .zip(kj)
                .fold(-0.0f32, |acc, (a, b)| a.mul_add(b.to_f32(), acc))
        } else {
            // ggml's `vec_dot_f16` order: 64 lane sums folded by its fixed tree, the last
            // `hd mod 64` products added in f64.
            let p: Vec<f32> = qh
                .iter()
                .zip(kj)
                .map(|(&a, b)| f16::from_f32(a).to_f32() * b.to_f32())
                .collect();
            let np = hd / 64 * 64;
            let lane = |r: usize| (r..np).step_by(64).fold(0.0f32, |acc, d| acc + p[d]);
            let acc = |l: usize| (lane(l) + lane(l + 32)) + (lane(l + 16) + lane(l + 48));
            let quarter = |i: usize| (acc(i) + acc(i + 8)) + (acc(i + 4) + acc(i + 12));
            let tree = (quarter(0) + quarter(2)) + (quarter(1) + quarter(3));
            p[np..]
                .iter()
                .fold(f64::from(tree), |s, &x| s + f64::from(x)) as f32
        }
    };
    let v: Vec<f32> = v.iter().map(|x| x.to_f32()).collect();
    if prompt {
        plain_attention::<f32>(cfg, shape, &dot, &v, Some(chunk_keys(bs)))
    } else {
        plain_attention::<f16>(cfg, shape, &dot, &v, None)
    }
}

/// The accumulator of an oracle: f32, or f16 rounded after every operation.
trait Acc: Copy {
    const ZERO: Self;
    fn get(self) -> f32;
    fn set(x: f32) -> Self;
}

impl Acc for f32 {
    const ZERO: f32 = 0.0;
    fn get(self) -> f32 {
        self
    }
    fn set(x: f32) -> f32 {
        x
    }
}

impl Acc for f16 {
    const ZERO: f16 = f16::ZERO;
    fn get(self) -> f32 {
        self.to_f32()
    }
    fn set(x: f32) -> f16 {
        f16::from_f32(x)
    }
}

/// Online-softmax attention with an f32 accumulator over f32 (or dequantized) V rows.
fn plain_f32(
    cfg: &ModelConfig,
    shape: &AttnShape,
    dot: &dyn Fn(usize, usize, usize) -> f32,
    v: &[f32],
) -> Vec<f32> {
    plain_attention::<f32>(cfg, shape, dot, v, None)
}

/// Online-softmax attention over f32 (or widened, or dequantized) V rows with an
/// accumulator of type `A`, key by key. `dot(h, t, j)` is the raw score of query head `h`
/// of token `t` against the key at position `j`; it is scaled (and soft-capped,
/// `c·tanh(s)`, when the model has a cap), and only the keys within the sliding window, if
/// any, are attended. With `tile`, the softmax runs tile by tile over the keys of each
/// `tile`-key span from position 0 (llama.cpp's tiled path, see the module docs of
/// `attention.rs`): one maximum per tile, what was accumulated rescaled once, the weights
/// and their sum by the scalar oracle of `AttnKernels::softmax_weights`.
fn plain_attention<A: Acc>(
    cfg: &ModelConfig,
    shape: &AttnShape,
    dot: &dyn Fn(usize, usize, usize) -> f32,
    v: &[f32],
    tile: Option<usize>,
) -> Vec<f32> {
    let (nh, hdv) = (cfg.n_head, cfg.head_dim_v);
    let group = nh / cfg.n_head_kv;
    let vd = cfg.v_dim();
    let scale = cfg.attn_scale / cfg.attn_softcap.unwrap_or(1.0);
    let mut out = vec![0.0; shape.n_tokens * nh * hdv];
    for t in 0..shape.n_tokens {
        let pos = shape.pos0 + t;
        let first = match shape.window {
            Some(w) if pos + 1 > w => pos + 1 - w,
            _ => 0,
        };
        for h in 0..nh {
            let g = h / group;
            let mut acc = vec![A::ZERO; hdv];
            let (mut max, mut sum) = (f32::NEG_INFINITY, 0.0f32);
            let score = |j: usize| {
                let s = dot(h, t, j) * scale;
                match cfg.attn_softcap {
                    Some(c) => c * s.tanh(),
                    None => s,
                }
            };
            if let Some(tk) = tile {
                let oracle = attn_kernels_for(Isa::Scalar).expect("the scalar kernels");
                let mut c0 = first / tk * tk;
                while c0 <= pos {
                    let keys = first.max(c0)..(pos + 1).min(c0 + tk);
                    let s: Vec<f32> = keys.clone().map(score).collect();
                    let mut w = vec![0.0; s.len()];
                    let (m, tile_sum) = oracle.softmax_weights(&s, max, &mut w);
                    if m > max {
                        let ms = kiln_quant::attn::exp(max - m);
                        acc.iter_mut().for_each(|a| *a = A::set(a.get() * ms));
                        sum *= ms;
                    }
                    for (j, &vs) in keys.zip(&w) {
                        let vj = &v[j * vd + g * hdv..][..hdv];
                        for (a, &x) in acc.iter_mut().zip(vj) {
                            *a = A::set(x.mul_add(vs, a.get()));
                        }
                    }
                    max = m;
                    sum += tile_sum;
                    c0 += tk;
                }
            }
            for j in (first..=pos).filter(|_| tile.is_none()) {
                let mut s = dot(h, t, j) * scale;
                if let Some(c) = cfg.attn_softcap {
                    s = c * s.tanh();
                }
                let vj = &v[j * vd + g * hdv..][..hdv];
                let (ms, vs) = if s > max {
                    let m = kiln_quant::attn::expf(max - s);
                    max = s;
                    (m, 1.0)
                } else {
                    (1.0, kiln_quant::attn::expf(s - max))
                };
                if ms != 1.0 {
                    acc.iter_mut().for_each(|a| *a = A::set(a.get() * ms));
                }
                for (a, &x) in acc.iter_mut().zip(vj) {
                    *a = A::set(x.mul_add(vs, a.get()));
                }
                sum = sum.mul_add(ms, vs);
            }
            let inv = if sum == 0.0 { 0.0 } else { 1.0 / sum };
            for (o, a) in out[t * nh * hdv + h * hdv..][..hdv].iter_mut().zip(&acc) {
                *o = a.get() * inv;
            }
        }
    }
    out
}

struct Case {
    /// Run the prompt arithmetic (for an f16 cache) rather than the one-row one.
    prompt: bool,
    cfg: ModelConfig,
    opts: KvOptions,
    n_ctx: usize,
    k: Vec<f32>,
    v: Vec<f32>,
    q: Vec<f32>,
}

impl Case {
    fn new(
        cfg: ModelConfig,
        k_type: KvType,
        v_type: KvType,
        bs: usize,
        n_ctx: usize,
        seed: u64,
    ) -> Case {
        let opts = KvOptions {
            k_type,
            v_type,
            block_size: bs,
            memory: None,
            // The arithmetic tests below read the stored form directly; the rotation has a
            // test of its own.
            rotation: false,
        };
        Case {
            prompt: false,
            k: values(n_ctx * cfg.k_dim(), seed),
            v: values(n_ctx * cfg.v_dim(), seed + 1),
            q: values(n_ctx * cfg.q_dim(), seed + 2),
            cfg,
            opts,
            n_ctx,
        }
    }

    /// A cache holding all `n_ctx` positions (written in chunks of `split`).
    fn cache(&self, split: usize) -> (KvCache, kiln_kv::SeqId) {
        let kc = self
            .opts
            .config(&self.cfg, self.n_ctx.div_ceil(self.opts.block_size) + 1);
        let mut c = KvCache::new(kc).expect("cache");
        let id = c.create_sequence(self.n_ctx);
        let (kd, vd) = (self.cfg.k_dim(), self.cfg.v_dim());
        let mut pos = 0;
        while pos < self.n_ctx {
            let n = split.min(self.n_ctx - pos);
            c.append(id, &vec![0; n]).expect("append");
            c.write_rows(
                id,
                0,
                pos,
                &self.k[pos * kd..(pos + n) * kd],
                &self.v[pos * vd..(pos + n) * vd],
            )
            .expect("write");
            pos += n;
        }
        (c, id)
    }

    /// Attention for queries `pos0..n_ctx`, evaluated in batches of `batch`.
    fn paged(
        &self,
        pos0: usize,
        batch: usize,
        window: Option<usize>,
        isa: Option<Isa>,
    ) -> Vec<f32> {
        let (c, id) = self.cache(7);
        let view = c.layer_view(id, 0).expect("view");
        let hv = self.cfg.n_head * self.cfg.head_dim_v;
        let qd = self.cfg.q_dim();
        let mut scratch = AttnScratch::new(
            &self.cfg,
            batch,
            self.opts.block_size,
            self.opts.k_type,
            self.opts.v_type,
        );
        let mut out = vec![0.0; (self.n_ctx - pos0) * hv];
        let mut t = pos0;
        while t < self.n_ctx {
            let n = batch.min(self.n_ctx - t);
            let shape = AttnShape {
                pos0: t,
                n_tokens: n,
                window,
            };
            let q = &self.q[t * qd..(t + n) * qd];
            let o = &mut out[(t - pos0) * hv..(t - pos0 + n) * hv];
            match isa {
                None => attention(&self.cfg, &shape, q, &view, &mut scratch, o, self.prompt),
                Some(i) => attention_with(
                    attn_kernels_for(i).expect("isa"),
                    &self.cfg,
                    &shape,
                    q,
                    &view,
                    &mut scratch,
                    o,
                    self.prompt,
                ),
            }
            .expect("attention");
            t += n;
        }
        out
    }
}

fn bits(x: &[f32]) -> Vec<u32> {
    x.iter().map(|v| v.to_bits()).collect()
}

#[test]
fn paged_f16_attention_equals_llama_cpps_one_row_and_prompt_arithmetic_bit_for_bit() {
    let shapes = [
        (9, 3, 64, 64, None),
        (4, 1, 256, 256, None),
        (4, 2, 80, 48, Some(50.0)),
        (2, 2, 40, 40, None),
    ];
    for (i, &(nh, nkv, hd, hdv, cap)) in shapes.iter().enumerate() {
        for (bs, n_ctx, pos0, batch, window) in [
            (16, 70, 0, 70, None),
            (16, 70, 31, 5, None),
            (5, 45, 0, 45, Some(9)),
            (32, 40, 39, 1, None),
            (16, 100, 3, 33, Some(40)),
        ] {
            let mut case = Case::new(
                config(nh, nkv, hd, hdv, cap),
                KvType::F16,
                KvType::F16,
                bs,
                n_ctx,
                i as u64,
            );
            let k16: Vec<f16> = case.k.iter().map(|&x| f16::from_f32(x)).collect();
            let v16: Vec<f16> = case.v.iter().map(|&x| f16::from_f32(x)).collect();
            let shape = AttnShape {
                pos0,
                n_tokens: n_ctx - pos0,
                window,
            };
            let q = &case.q[pos0 * case.cfg.q_dim()..];
            for prompt in [false, true] {
                let want = plain_f16(&case.cfg, &shape, q, &k16, &v16, prompt, bs);
                case.prompt = prompt;
                let got = case.paged(pos0, batch, window, None);
                assert_eq!(
                    bits(&got),
                    bits(&want),
                    "shape {i}, bs {bs}, batch {batch}, window {window:?}, prompt {prompt}"
                );
            }
        }
    }
}

#[test]
fn f32_and_quantized_value_pages_accumulate_in_f32() {
    for v_type in [KvType::F32, KvType::Q8_0, KvType::Q4_0] {
        let case = Case::new(config(4, 2, 64, 64, None), KvType::F32, v_type, 16, 50, 9);
        let (c, id) = case.cache(50);
        // What the cache holds, read back as f32 (exact for F32, dequantized otherwise).
        let (kd, vd) = (case.cfg.k_dim(), case.cfg.v_dim());
        let (mut k, mut v) = (vec![0.0; 50 * kd], vec![0.0; 50 * vd]);
        for p in 0..50 {
            c.read(
                id,
                0,
                p,
                &mut k[p * kd..(p + 1) * kd],
                &mut v[p * vd..(p + 1) * vd],
            )
            .expect("read");
        }
        let q = &case.q;
        let (hd, nh, group) = (case.cfg.head_dim, case.cfg.n_head, 2);
        let dot = |h: usize, t: usize, j: usize| {
            let kr = &k[j * kd + h / group * hd..][..hd];
            let mut acc = -0.0f32;
            for (a, &b) in q[t * nh * hd + h * hd..][..hd].iter().zip(kr) {
                acc = a.mul_add(b, acc);
            }
            acc
        };
        let shape = AttnShape {
            pos0: 0,
            n_tokens: 50,
            window: None,
        };
        let want = plain_f32(&case.cfg, &shape, &dot, &v);
        let got = case.paged(0, 17, None, None);
        assert_eq!(bits(&got), bits(&want), "V {v_type}");
    }
}

#[test]
fn quantized_key_pages_use_the_integer_dot_of_the_quantized_query() {
    let case = Case::new(
        config(4, 2, 64, 64, None),
        KvType::Q8_0,
        KvType::F32,
        16,
        40,
        3,
    );
    let (c, id) = case.cache(40);
    let (kd, vd) = (case.cfg.k_dim(), case.cfg.v_dim());
    let mut v = vec![0.0; 40 * vd];
    let mut kdummy = vec![0.0; kd];
    for p in 0..40 {
        c.read(id, 0, p, &mut kdummy, &mut v[p * vd..(p + 1) * vd])
            .expect("read");
    }
    // The stored K rows as bytes, head by head, straight from the quantizer.
    let hd = case.cfg.head_dim;
    let row = GgmlType::Q8_0.block_bytes() * hd / 32;
    let mut kq = vec![0u8; 40 * 2 * row];
    for (p, kr) in case.k.chunks_exact(kd).enumerate() {
        for g in 0..2 {
            kiln_quant::attn::store_row(
                GgmlType::Q8_0,
                &kr[g * hd..(g + 1) * hd],
                &mut kq[(p * 2 + g) * row..][..row],
            )
            .expect("store");
        }
    }
    let kern = kiln_quant::kernels();
    let q = &case.q;
    let nh = case.cfg.n_head;
    let dot = |h: usize, t: usize, j: usize| {
        let g = h / 2;
        let mut qa = vec![0u8; row];
        kern.quantize_activations(GgmlType::Q8_0, &q[t * nh * hd + h * hd..][..hd], &mut qa)
            .expect("quantize");
        kern.dot(GgmlType::Q8_0, &kq[(j * 2 + g) * row..][..row], &qa)
            .expect("dot")
    };
    let shape = AttnShape {
        pos0: 0,
        n_tokens: 40,
        window: None,
    };
    let want = plain_f32(&case.cfg, &shape, &dot, &v);
    let got = case.paged(0, 40, None, None);
    assert_eq!(bits(&got), bits(&want));
}

#[test]
fn results_do_not_depend_on_batch_threads_or_isa() {
    for prompt in [false, true] {
        let mut case = Case::new(
            config(9, 3, 64, 64, None),
            KvType::F16,
            KvType::F16,
            16,
            90,
            5,
        );
        case.prompt = prompt;
        f16_results_do_not_depend_on_batch_threads_or_isa(&case);
    }
    let f32case = Case::new(
        config(4, 4, 48, 48, None),
        KvType::F32,
        KvType::F32,
        8,
        30,
        6,
    );
    let a = f32case.paged(0, 30, None, Some(Isa::Scalar));
    for isa in Isa::ALL {
        if attn_kernels_for(isa).is_some() {
            assert_eq!(
                bits(&f32case.paged(0, 30, None, Some(isa))),
                bits(&a),
                "f32 {isa}"
            );
        }
    }
}

fn f16_results_do_not_depend_on_batch_threads_or_isa(case: &Case) {
    let whole = case.paged(0, 90, None, None);
    assert_eq!(
        bits(&case.paged(0, 1, None, None)),
        bits(&whole),
        "decode-style"
    );
    assert_eq!(
        bits(&case.paged(0, 13, None, None)),
        bits(&whole),
        "odd batches"
    );
    let one = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .expect("pool");
    assert_eq!(
        bits(&one.install(|| case.paged(0, 90, None, None))),
        bits(&whole),
        "1 thread"
    );
    let three = rayon::ThreadPoolBuilder::new()
        .num_threads(3)
        .build()
        .expect("pool");
    assert_eq!(
        bits(&three.install(|| case.paged(0, 90, None, None))),
        bits(&whole),
        "3 threads"
    );
    for isa in Isa::ALL {
        if attn_kernels_for(isa).is_some() {
            assert_eq!(
                bits(&case.paged(0, 90, None, Some(isa))),
                bits(&whole),
                "{isa}"
            );
        }
    }
}

#[test]
fn rotated_pages_equal_unrotated_pages_of_rotated_inputs_rotated_back() {
    use kiln_quant::attn::{hadamard_rotate, key_rotation_size, value_rotation_size};
    // Head size 128: keys rotate by blocks of 128, values by blocks of 64.
    for (k_type, v_type) in [
        (KvType::Q4_0, KvType::Q4_0),
        (KvType::Q8_0, KvType::F16),
        (KvType::F16, KvType::Q5_0),
    ] {
        let mut rot = Case::new(config(4, 2, 128, 128, None), k_type, v_type, 16, 45, 21);
        rot.opts.rotation = true;
        let hd = rot.cfg.head_dim;
        let kr = key_rotation_size(hd).filter(|_| !k_type.is_float());
        let vr = value_rotation_size(hd).filter(|_| !v_type.is_float());
        assert_eq!(rot.opts.config(&rot.cfg, 1).k_rotation(), kr);
        assert_eq!(rot.opts.config(&rot.cfg, 1).v_rotation(), vr);
        let mut plain = Case::new(config(4, 2, 128, 128, None), k_type, v_type, 16, 45, 21);
        if let Some(n) = kr {
            hadamard_rotate(&mut plain.q, n);
            hadamard_rotate(&mut plain.k, n);
        }
        if let Some(n) = vr {
            hadamard_rotate(&mut plain.v, n);
        }
        let mut want = plain.paged(0, 45, None, None);
        if let Some(n) = vr {
            hadamard_rotate(&mut want, n);
        }
        for batch in [1, 45] {
            let got = rot.paged(0, batch, None, None);
            assert_eq!(bits(&got), bits(&want), "{k_type}/{v_type}, batch {batch}");
        }
        // An unrotated cache of the same types gives other (less accurate) results.
        let off = Case::new(config(4, 2, 128, 128, None), k_type, v_type, 16, 45, 21);
        assert_ne!(bits(&off.paged(0, 45, None, None)), bits(&want));
    }
}

#[test]
fn grouped_query_tiles_over_long_contexts_equal_the_plain_attention_bit_for_bit() {
    // GQA ratios 1, 4, 7 and 8 (a task runs a KV group's heads together) and head sizes 64,
    // 128 and 256, over contexts longer than a key chunk and a tile of rows and a multiple
    // of neither, causal and with a sliding window; in whole-prompt, odd and one-row batches.
    let shapes = [(4, 4, 64), (8, 2, 128), (7, 1, 64), (16, 2, 256)];
    for (i, &(nh, nkv, hd)) in shapes.iter().enumerate() {
        for window in [None, Some(150)] {
            let n_ctx = 301;
            let mut case = Case::new(
                config(nh, nkv, hd, hd, None),
                KvType::F16,
                KvType::F16,
                16,
                n_ctx,
                40 + i as u64,
            );
            let k16: Vec<f16> = case.k.iter().map(|&x| f16::from_f32(x)).collect();
            let v16: Vec<f16> = case.v.iter().map(|&x| f16::from_f32(x)).collect();
            let pos0 = 37;
            let shape = AttnShape {
                pos0,
                n_tokens: n_ctx - pos0,
                window,
            };
            let q = &case.q[pos0 * case.cfg.q_dim()..];
            for prompt in [false, true] {
                let want = bits(&plain_f16(&case.cfg, &shape, q, &k16, &v16, prompt, 16));
                case.prompt = prompt;
                for batch in [n_ctx, 45, 1] {
                    let got = case.paged(pos0, batch, window, None);
                    assert_eq!(
                        bits(&got),
                        want,
                        "heads {nh}/{nkv}, hd {hd}, window {window:?}, prompt {prompt}, batch {batch}"
                    );
                }
            }
        }
    }
}
