//! Replays one forward pass's worth of matmuls of a real model (every layer's Q, K, V, O,
//! gate, up, down and the output head) on seeded activations, to measure the kernels and
//! their parallel dispatch apart from the rest of the model.
//!
//! `cargo run --release -p kiln-quant --example matmul_sim -- MODEL N_TOKENS THREADS [REPS]`
//! prints the time per pass, weight GB/s and, for N_TOKENS > 1, tokens/s.
//!
//! A mixture-of-experts layer (`ffn_gate_exps`, `ffn_up_exps`, `ffn_down_exps`) is replayed
//! as the model runs it: the experts' token rows laid out one group after another (a group
//! that `group_starts_aligned` says so on a multiple of eight), gate and up as one
//! `matmul_grouped` call, down as a second. By default the router spreads the tokens evenly:
//! every expert gets `N_TOKENS · expert_used_count / expert_count` of them (at least one).
//! `matmul_sim MODEL N_TOKENS THREADS REPS COUNTS` takes the tokens per expert from the file
//! `COUNTS` instead: one line per MoE layer (reused in turn when there are fewer lines than
//! layers), each the layer's `expert_count` token counts separated by spaces, commas or
//! brackets (e.g. counted in a real prefill of `N_TOKENS` tokens).

use std::time::Instant;

use kiln_format::GgufFile;
use kiln_quant::{
    GROUP_ROW_ALIGN, MatmulGroup, MatmulScratch, QMatrix, group_starts_aligned, matmul_grouped,
    matmul_prepared,
};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("micro") {
        micro(&args[2..]);
        return;
    }
    if args.get(1).map(String::as_str) == Some("gemm") {
        gemm(&args[2..]);
        return;
    }
    let model = args.get(1).map_or("smollm2-135m", String::as_str);
    let n: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(1);
    let threads: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(1);
    let reps: usize = args.get(4).and_then(|s| s.parse().ok()).unwrap_or(20);
    let path = kiln_hub::resolve(model).expect("model");
    let file = GgufFile::open(&path).expect("gguf");
    let mat = |name: &str| -> Option<QMatrix<'_>> {
        let info = file.tensor_info(name)?;
        let (cols, rows) = (info.dims[0] as usize, info.dims[1] as usize);
        Some(QMatrix::new(info.ty, rows, cols, file.tensor_data(info)).expect("matrix"))
    };
    // Expert `e` of a stacked expert tensor.
    let expert = |name: &str, e: usize| -> Option<QMatrix<'_>> {
        let info = file.tensor_info(name)?;
        let (cols, rows) = (info.dims[0] as usize, info.dims[1] as usize);
        let data = file.tensor_data(info);
        let per = data.len() / info.dims[2] as usize;
        Some(QMatrix::new(info.ty, rows, cols, &data[e * per..(e + 1) * per]).expect("expert"))
    };
    let arch = file
        .metadata()
        .str("general.architecture")
        .unwrap_or("llama");
    let used = file
        .metadata()
        .u32(&format!("{arch}.expert_used_count"))
        .unwrap_or(0) as usize;
    let mut layers = Vec::new();
    // Per layer, if it is a MoE layer: per expert its gate, up and down matrices.
    let mut moe: Vec<Option<Vec<[QMatrix<'_>; 3]>>> = Vec::new();
    for il in 0.. {
        let Some(q) = mat(&format!("blk.{il}.attn_q.weight")) else {
            break;
        };
        let g = |s: &str| mat(&format!("blk.{il}.{s}.weight")).expect(s);
        let ffn = if let Some(gate) = mat(&format!("blk.{il}.ffn_gate.weight")) {
            moe.push(None);
            [gate, g("ffn_up"), g("ffn_down")]
        } else {
            let name = |s: &str| format!("blk.{il}.{s}.weight");
            let n_exp = file
                .tensor_info(&name("ffn_gate_exps"))
                .expect("experts")
                .dims[2];
            moe.push(Some(
                (0..n_exp as usize)
                    .map(|e| {
                        [
                            expert(&name("ffn_gate_exps"), e).expect("gate"),
                            expert(&name("ffn_up_exps"), e).expect("up"),
                            expert(&name("ffn_down_exps"), e).expect("down"),
                        ]
                    })
                    .collect(),
            ));
            // Placeholders; the experts run instead (below).
            [g("attn_q"), g("attn_q"), g("attn_q")]
        };
        layers.push([
            q,
            g("attn_k"),
            g("attn_v"),
            g("attn_output"),
            ffn[0],
            ffn[1],
            ffn[2],
        ]);
    }
    let moe_tokens = moe
        .iter()
        .flatten()
        .next()
        .map_or(0, |l| (n * used).div_ceil(l.len()).max(1));
    // Per MoE layer (in turn), the tokens of each expert.
    let counts: Vec<Vec<usize>> = match args.get(5) {
        Some(f) => std::fs::read_to_string(f)
            .expect("counts file")
            .lines()
            .map(|l| {
                l.split(|c: char| !c.is_ascii_digit())
                    .filter(|w| !w.is_empty())
                    .map(|w| w.parse().expect("count"))
                    .collect::<Vec<usize>>()
            })
            .filter(|c| !c.is_empty())
            .collect(),
        None => moe
            .iter()
            .flatten()
            .next()
            .map(|l| vec![moe_tokens; l.len()])
            .into_iter()
            .collect(),
    };
    // Each layer's group layout: per expert its first row, and the rows in all.
    let layouts: Vec<(Vec<usize>, usize)> = counts
        .iter()
        .map(|c| {
            let mut row = 0;
            let starts = c
                .iter()
                .map(|&c| {
                    if group_starts_aligned(c) {
                        row = usize::next_multiple_of(row, GROUP_ROW_ALIGN);
                    }
                    let s = row;
                    row += c;
                    s
                })
                .collect();
            (starts, row)
        })
        .collect();
    let moe_rows = layouts.iter().map(|l| l.1).max().unwrap_or(0);
    let output = mat("output.weight")
        .or_else(|| mat("token_embd.weight"))
        .expect("output");
    let d = output.cols();
    let max_rows = layers
        .iter()
        .flatten()
        .map(|m| m.rows().max(m.cols()))
        .max()
        .unwrap_or(d)
        .max(output.rows());
    let x: Vec<f32> = (0..n * max_rows)
        .map(|i| (i * 7919 % 1000) as f32 / 500.0 - 1.0)
        .collect();
    let mut y = vec![0.0f32; n * max_rows];
    let xe: Vec<f32> = (0..moe_rows * max_rows)
        .map(|i| (i * 7919 % 1000) as f32 / 500.0 - 1.0)
        .collect();
    let mut ye = [
        vec![0.0f32; moe_rows * max_rows],
        vec![0.0f32; moe_rows * max_rows],
    ];
    let mut s = MatmulScratch::default();
    let bytes: usize = layers
        .iter()
        .enumerate()
        .flat_map(|(il, l)| if moe[il].is_some() { &l[..4] } else { &l[..] })
        .chain(moe.iter().flatten().flatten().flatten())
        .map(|m| m.rows() * m.row_bytes())
        .sum::<usize>()
        + output.rows() * output.row_bytes();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("pool");
    let mut times = Vec::new();
    let mut cpu = 0.0;
    pool.install(|| {
        for rep in 0..reps + 2 {
            let t0 = Instant::now();
            for (il, l) in layers.iter().enumerate() {
                s.prepare(&x[..n * l[0].cols()], n, l[0].cols());
                for m in &l[..3] {
                    matmul_prepared(m, &mut s, &mut y[..n * m.rows()]);
                }
                s.prepare(&x[..n * l[3].cols()], n, l[3].cols());
                matmul_prepared(&l[3], &mut s, &mut y[..n * l[3].rows()]);
                if let Some(experts) = &moe[il] {
                    let li = moe[..il].iter().flatten().count() % layouts.len();
                    let (starts, rows) = &layouts[li];
                    let rows = *rows;
                    let (mut gu, mut dn) = (Vec::new(), Vec::new());
                    for (e, [gate, up, down]) in experts.iter().enumerate() {
                        let c = counts[li].get(e).copied().unwrap_or(0);
                        if c == 0 {
                            continue;
                        }
                        let g = |w, out| MatmulGroup {
                            w,
                            first: starts[e],
                            n: c,
                            out,
                            out_row: starts[e],
                        };
                        gu.push(g(*up, 0));
                        gu.push(g(*gate, 1));
                        dn.push(g(*down, 0));
                    }
                    let [y0, y1] = &mut ye;
                    let (f, dd) = (experts[0][0].rows(), experts[0][0].cols());
                    s.prepare(&xe[..rows * dd], rows, dd);
                    matmul_grouped(&gu, &mut s, [&mut y0[..rows * f], &mut y1[..rows * f]]);
                    s.prepare(&xe[..rows * f], rows, f);
                    matmul_grouped(&dn, &mut s, [&mut y0[..rows * dd]]);
                    continue;
                }
                s.prepare(&x[..n * l[4].cols()], n, l[4].cols());
                for m in &l[4..6] {
                    matmul_prepared(m, &mut s, &mut y[..n * m.rows()]);
                }
                s.prepare(&x[..n * l[6].cols()], n, l[6].cols());
                matmul_prepared(&l[6], &mut s, &mut y[..n * l[6].rows()]);
            }
            // The output head runs for the last token only (as in generation / llama-bench).
            s.prepare(&x[..d], 1, d);
            matmul_prepared(&output, &mut s, &mut y[..output.rows()]);
            if rep == 1 {
                cpu = -process_cpu_seconds();
            }
            if rep >= 2 {
                times.push(t0.elapsed().as_secs_f64());
            }
        }
    });
    cpu += process_cpu_seconds();
    let cpu = cpu / reps as f64;
    times.sort_by(f64::total_cmp);
    let med = times[times.len() / 2];
    let min = times[0];
    println!(
        "{model} n={n} t={threads}: median {:.3} ms (min {:.3}, cpu {:.3}), {:.2} GB/s weights, {:.1} tok/s",
        med * 1e3,
        min * 1e3,
        cpu * 1e3,
        bytes as f64 / med / 1e9,
        n as f64 / med
    );
}

/// CPU time of the whole process (all threads), immune to time spent preempted.
fn process_cpu_seconds() -> f64 {
    #[repr(C)]
    struct Timespec {
        sec: i64,
        nsec: i64,
    }
    unsafe extern "C" {
        fn clock_gettime(clock: i32, ts: *mut Timespec) -> i32;
    }
    const CLOCK_PROCESS_CPUTIME_ID: i32 = 2;
    let mut ts = Timespec { sec: 0, nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec (64-bit Linux layout).
    unsafe { clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    ts.sec as f64 + ts.nsec as f64 * 1e-9
}

/// `micro TYPE ROWS COLS REPS`: one GEMV (n = 1) on one thread, minimum over `REPS` calls,
/// and a plain AVX2 read of the same bytes for comparison.
fn micro(args: &[String]) {
    use kiln_quant::GgmlType;
    let ty_name = args.first().map_or("Q4_1", String::as_str);
    let ty = kiln_format::ALL_GGML_TYPES
        .iter()
        .copied()
        .find(|t| t.name().eq_ignore_ascii_case(ty_name))
        .expect("type");
    let rows: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(64);
    let cols: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(2048);
    let reps: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(1000);
    let n_blocks = rows * cols / ty.block_elems();
    let mut data = vec![0u8; n_blocks * ty.block_bytes()];
    let mut seed = 12345u64;
    for b in data.iter_mut() {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        *b = (seed >> 33) as u8;
    }
    // Small finite f16 scales where the block has them.
    let small = half::f16::from_f32(0.01).to_bits().to_le_bytes();
    for b in data.chunks_exact_mut(ty.block_bytes()) {
        match ty {
            GgmlType::Q6_K => b[208..210].copy_from_slice(&small),
            GgmlType::Q2_K => {
                b[80..82].copy_from_slice(&small);
                b[82..84].copy_from_slice(&small);
            }
            GgmlType::Q3_K => b[108..110].copy_from_slice(&small),
            GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => {}
            _ => {
                b[0..2].copy_from_slice(&small);
                if matches!(
                    ty,
                    GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q4_K | GgmlType::Q5_K
                ) {
                    b[2..4].copy_from_slice(&small);
                }
            }
        }
    }
    let w = QMatrix::new(ty, rows, cols, &data).expect("matrix");
    let x: Vec<f32> = (0..cols)
        .map(|i| (i * 7919 % 1000) as f32 / 500.0 - 1.0)
        .collect();
    let mut y = vec![0.0f32; rows];
    let mut s = MatmulScratch::default();
    s.prepare(&x, 1, cols);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .expect("pool");
    let mut best = f64::MAX;
    pool.install(|| {
        for _ in 0..reps {
            let t0 = Instant::now();
            matmul_prepared(&w, &mut s, &mut y);
            best = best.min(t0.elapsed().as_secs_f64());
        }
    });
    let mut best_read = f64::MAX;
    let mut sink = 0u64;
    for _ in 0..reps.min(200) {
        let t0 = Instant::now();
        sink = sink.wrapping_add(read_all(&data));
        best_read = best_read.min(t0.elapsed().as_secs_f64());
    }
    let rb = w.row_bytes();
    let mut best_read4 = f64::MAX;
    for _ in 0..reps.min(200) {
        let t0 = Instant::now();
        for q in data.chunks_exact(4 * rb) {
            let rs: [&[u8]; 4] = std::array::from_fn(|r| &q[r * rb..(r + 1) * rb]);
            let mut acc = [0u64; 4];
            for i in (0..rb / 8).step_by(4) {
                for (a, row) in acc.iter_mut().zip(rs) {
                    *a = a.wrapping_add(u64::from_le_bytes(
                        row[8 * i..8 * i + 8].try_into().unwrap_or([0; 8]),
                    ));
                }
            }
            sink = sink.wrapping_add(acc.iter().sum::<u64>());
        }
        best_read4 = best_read4.min(t0.elapsed().as_secs_f64());
    }
    let mut best1 = f64::MAX;
    let k = kiln_quant::kernels();
    let act = kiln_quant::vec_dot_type(ty).expect("act");
    let mut a = vec![0u8; cols / act.block_elems() * act.block_bytes()];
    k.quantize_activations(act, &x, &mut a).expect("q");
    for _ in 0..reps {
        let t0 = Instant::now();
        for (r, yr) in y.iter_mut().enumerate().take(rows) {
            *yr = k.dot(ty, w.row(r), &a).expect("dot");
        }
        best1 = best1.min(t0.elapsed().as_secs_f64());
    }
    println!(
        "  4-stream read (every 4th word) {:.2} GB/s-equiv, one-row dots {:.2} GB/s",
        data.len() as f64 / best_read4 / 1e9,
        data.len() as f64 / best1 / 1e9
    );
    println!(
        "{} {rows}x{cols} ({} KiB): gemv {:.2} GB/s ({:.2} ns/block), plain read {:.2} GB/s [{}]",
        ty.name(),
        data.len() / 1024,
        data.len() as f64 / best / 1e9,
        best * 1e9 / n_blocks as f64,
        data.len() as f64 / best_read / 1e9,
        sink & 1
    );
}

/// Sums every 8-byte word (the compiler vectorizes it): a memory-read baseline.
fn read_all(d: &[u8]) -> u64 {
    d.chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
        .fold(0u64, u64::wrapping_add)
}

/// `gemm TYPE ROWS COLS TOKENS REPS`: one GEMM on one thread, minimum wall time over `REPS`
/// calls (the matrix and activations stay in cache, so the minimum is the kernels' own speed
/// even on a busy machine), with the multiply-accumulates per second.
fn gemm(args: &[String]) {
    let ty_name = args.first().map_or("Q4_K", String::as_str);
    let ty = kiln_format::ALL_GGML_TYPES
        .iter()
        .copied()
        .find(|t| t.name().eq_ignore_ascii_case(ty_name))
        .expect("type");
    let rows: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(512);
    let cols: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(3072);
    let n: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(64);
    let reps: usize = args.get(4).and_then(|s| s.parse().ok()).unwrap_or(200);
    let data = random_matrix(ty, rows, cols);
    let w = QMatrix::new(ty, rows, cols, &data).expect("matrix");
    let x: Vec<f32> = (0..n * cols)
        .map(|i| (i * 7919 % 1000) as f32 / 500.0 - 1.0)
        .collect();
    let mut y = vec![0.0f32; n * rows];
    let mut s = MatmulScratch::default();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .expect("pool");
    let mut best = f64::MAX;
    pool.install(|| {
        s.prepare(&x, n, cols);
        for _ in 0..reps {
            let t0 = Instant::now();
            matmul_prepared(&w, &mut s, &mut y);
            best = best.min(t0.elapsed().as_secs_f64());
        }
    });
    println!(
        "{ty} {rows}x{cols} n={n}: best {:.1} us, {:.1} GMAC/s (y[0] = {})",
        best * 1e6,
        (rows * cols * n) as f64 / best * 1e-9,
        y[0]
    );
}

/// A `rows` × `cols` matrix of random blocks of `ty` with small finite scales.
fn random_matrix(ty: kiln_quant::GgmlType, rows: usize, cols: usize) -> Vec<u8> {
    use kiln_quant::GgmlType;
    let n_blocks = rows * cols / ty.block_elems();
    let mut data = vec![0u8; n_blocks * ty.block_bytes()];
    let mut seed = 12345u64;
    for b in data.iter_mut() {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        *b = (seed >> 33) as u8;
    }
    let small = half::f16::from_f32(0.01).to_bits().to_le_bytes();
    for b in data.chunks_exact_mut(ty.block_bytes()) {
        match ty {
            GgmlType::Q6_K => b[208..210].copy_from_slice(&small),
            GgmlType::Q2_K => {
                b[80..82].copy_from_slice(&small);
                b[82..84].copy_from_slice(&small);
            }
            GgmlType::Q3_K => b[108..110].copy_from_slice(&small),
            GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => {}
            _ => {
                b[0..2].copy_from_slice(&small);
                if matches!(
                    ty,
                    GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q4_K | GgmlType::Q5_K
                ) {
                    b[2..4].copy_from_slice(&small);
                }
            }
        }
    }
    data
}
