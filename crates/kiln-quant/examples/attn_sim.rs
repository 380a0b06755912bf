//! Replays the attention of one decode step at depth (every layer and KV group, the query
//! heads of a group together) over a cache laid out as kiln-kv lays it out (per layer an
//! arena of blocks, each block the pages of every KV head), with the one-row arithmetic of
//! an f16 cache: the many-row score kernel in ggml's `vec_dot_f16` order, the key-by-key
//! online softmax kernel, the f16 accumulator. Prints the best time per token of each phase, one thread.
//!
//! `cargo run --release -p kiln-quant --example attn_sim -- LAYERS KV_HEADS GROUP HEAD_DIM
//! DEPTH [REPS] [ISA]` (SmolLM2-135M: `30 3 3 64 4096`; Llama-3.2-3B: `28 8 3 128 4096`).

use half::f16;
use kiln_quant::Isa;
use kiln_quant::attn::attn_kernels_for;

/// `struct timespec` of Linux x86-64.
#[repr(C)]
struct Timespec {
    sec: i64,
    nsec: i64,
}

unsafe extern "C" {
    fn clock_gettime(clock: i32, t: *mut Timespec) -> i32;
}

/// This thread's CPU time in seconds (the machine may be shared: wall time would count
/// other processes' turns).
fn cpu_now() -> f64 {
    let mut t = Timespec { sec: 0, nsec: 0 };
    // SAFETY: `t` is a valid `timespec`; 3 is `CLOCK_THREAD_CPUTIME_ID`.
    unsafe { clock_gettime(3, &mut t) };
    t.sec as f64 + t.nsec as f64 * 1e-9
}

fn main() {
    let a: Vec<usize> = std::env::args()
        .skip(1)
        .take(6)
        .map(|s| s.parse().expect("a number"))
        .collect();
    let (layers, kvh, group, hd, depth) = (a[0], a[1], a[2], a[3], a[4]);
    let reps = a.get(5).copied().unwrap_or(5);
    let isa = match std::env::args().nth(7).as_deref() {
        Some("avx2") => Isa::Avx2,
        Some("scalar") => Isa::Scalar,
        _ => Isa::Avx512,
    };
    let ak = attn_kernels_for(isa).expect("ISA available");
    let bs = 16;
    let blocks = depth.div_ceil(bs);
    let page = hd * bs;
    let stride = kvh * page;
    // Blocks in a shuffled order, as a long-lived cache hands them out.
    let mut order: Vec<usize> = (0..blocks).collect();
    let mut z = 0x9e37_79b9_7f4a_7c15u64;
    let mut rnd = || {
        z = z
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        z >> 33
    };
    for i in (1..blocks)
        .rev()
        .filter(|_| std::env::var_os("SIM_CONTIGUOUS").is_none())
    {
        order.swap(i, rnd() as usize % (i + 1));
    }
    let arena = |rnd: &mut dyn FnMut() -> u64| -> Vec<f16> {
        (0..blocks * stride)
            .map(|_| f16::from_f32((rnd() % 2001) as f32 / 1000.0 - 1.0))
            .collect()
    };
    let ks: Vec<Vec<f16>> = (0..layers).map(|_| arena(&mut rnd)).collect();
    let vs: Vec<Vec<f16>> = (0..layers).map(|_| arena(&mut rnd)).collect();
    let q: Vec<f32> = (0..group * hd)
        .map(|_| (rnd() % 2001) as f32 / 500.0 - 2.0)
        .collect();
    let mut qr = vec![0.0; q.len()];
    ak.round_f16(&q, &mut qr);
    let scale = 1.0 / (hd as f32).sqrt();
    let chunk = 128 / bs;
    let nk = chunk * bs;
    let mut sc = vec![0.0f32; group * nk];
    let mut ms = vec![0.0f32; group * nk];
    let mut wv = vec![0.0f32; group * nk];
    let mut acc = vec![f16::ZERO; group * hd];
    let mut pages = vec![0usize; chunk];
    let (mut t_all, mut t_sc, mut t_acc) = (f64::MAX, f64::MAX, f64::MAX);
    let mut check = 0.0f32;
    // Pass 0: the whole step; pass 1: scores only; pass 2: values only (with the weights the
    // last chunk left).
    for _ in 0..reps {
        for pass in 0..3 {
            let t = cpu_now();
            for l in 0..layers {
                for g in 0..kvh {
                    let (mut max, mut sum) = (vec![f32::NEG_INFINITY; group], vec![0.0f32; group]);
                    acc.fill(f16::ZERO);
                    let mut p0 = 0;
                    while p0 < blocks {
                        let p1 = (p0 + chunk).min(blocks);
                        for (i, p) in (p0..p1).enumerate() {
                            pages[i] = order[p] * stride + g * page;
                        }
                        let pages = &pages[..p1 - p0];
                        let n = (p1 - p0) * bs;
                        if pass != 2 {
                            ak.scores_rows_f16_split(
                                &qr,
                                hd,
                                &ks[l],
                                pages,
                                bs,
                                scale,
                                &mut sc[..group * n],
                            );
                        }
                        if pass == 0 {
                            for r in 0..group {
                                let w = r * n..(r + 1) * n;
                                (max[r], sum[r]) = ak.softmax_online(
                                    &sc[w.clone()],
                                    max[r],
                                    sum[r],
                                    &mut ms[w.clone()],
                                    &mut wv[w],
                                );
                            }
                        }
                        if pass != 1 {
                            ak.accum_rows_f16(&mut acc, hd, &vs[l], pages, bs, 0, n, &ms, &wv, n);
                        }
                        p0 = p1;
                    }
                    check += acc[0].to_f32() / sum[0] + sc[0];
                }
            }
            let dt = cpu_now() - t;
            match pass {
                0 => t_all = t_all.min(dt),
                1 => t_sc = t_sc.min(dt),
                _ => t_acc = t_acc.min(dt),
            }
        }
    }
    let t_sm = t_all - t_sc - t_acc;
    let bytes = (2 * layers * kvh * depth * hd * 2) as f64;
    let total = t_all;
    println!(
        "{isa:?} per token: scores {:.3} ms, softmax (the rest) {:.3} ms, values {:.3} ms, total {:.3} ms \
         ({:.1} GB/s of K+V) [{check:.4}]",
        t_sc * 1e3,
        t_sm * 1e3,
        t_acc * 1e3,
        total * 1e3,
        bytes / total / 1e9
    );
}
