//! Kernel throughput per type × ISA, and the SmolLM2-135M matmul shapes.
//!
//! `cargo bench -p kiln-quant --bench kernels` (filter with a trailing name, e.g. `-- matmul`).
//! Dot and dequantize report GB/s of *weight* bytes on an L1/L2-resident row; quantize GB/s
//! of f32 input; matmul the time per call inside a pool of all cores and of one thread
//! (throughput in multiply-accumulates).

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use kiln_quant::{GgmlType, Isa, MatmulScratch, QMatrix, kernels_for, matmul, vec_dot_type};

/// Deterministic pseudo-random bytes.
fn bytes(n: usize, mut s: u64) -> Vec<u8> {
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (s >> 33) as u8
        })
        .collect()
}

/// Random weight blocks with small finite scales (random bytes elsewhere).
fn weights(ty: GgmlType, n_elems: usize) -> Vec<u8> {
    let n_blocks = n_elems / ty.block_elems();
    let mut v = bytes(n_blocks * ty.block_bytes(), ty.id() as u64 + 1);
    let small = half::f16::from_f32(0.01).to_bits().to_le_bytes();
    for b in v.chunks_exact_mut(ty.block_bytes()) {
        match ty {
            GgmlType::F32 => b.copy_from_slice(&0.01f32.to_le_bytes()),
            GgmlType::F16 => b.copy_from_slice(&small),
            GgmlType::BF16 => b.copy_from_slice(&0x3c23u16.to_le_bytes()),
            GgmlType::Q6_K => b[208..210].copy_from_slice(&small),
            GgmlType::Q2_K => {
                b[80..82].copy_from_slice(&small);
                b[82..84].copy_from_slice(&small);
            }
            GgmlType::Q3_K => b[108..110].copy_from_slice(&small),
            GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q4_K | GgmlType::Q5_K => {
                b[0..2].copy_from_slice(&small);
                b[2..4].copy_from_slice(&small);
            }
            _ => b[0..2].copy_from_slice(&small),
        }
    }
    v
}

fn acts(n: usize) -> Vec<f32> {
    bytes(n, 99)
        .iter()
        .map(|&b| b as f32 / 64.0 - 2.0)
        .collect()
}

fn tables() -> Vec<&'static kiln_quant::Kernels> {
    Isa::ALL.into_iter().filter_map(kernels_for).collect()
}

fn bench_dot(c: &mut Criterion) {
    let n = 4096;
    let mut g = c.benchmark_group("dot");
    g.warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .sample_size(20);
    for ty in kiln_quant::supported_types() {
        let w = weights(ty, n);
        let act = vec_dot_type(ty).expect("supported");
        g.throughput(Throughput::Bytes(w.len() as u64));
        for k in tables() {
            let mut a = vec![0u8; n / act.block_elems() * act.block_bytes()];
            k.quantize_activations(act, &acts(n), &mut a)
                .expect("quantize");
            g.bench_with_input(BenchmarkId::new(ty.name(), k.isa()), &(), |b, _| {
                b.iter(|| k.dot(ty, black_box(&w), black_box(&a)).expect("dot"))
            });
        }
    }
    g.finish();
}

/// The GEMM micro-kernel (`dot8`: one row × eight tokens) and the GEMV kernel (`dotr4`: four
/// rows × one token) of the types with such kernels, per table; GB/s of weight bytes read
/// (each `dot8` reads its row once for eight tokens). The checked entry points widen the
/// activation scales on every call, which the matmul driver does once per batch.
fn bench_gemm(c: &mut Criterion) {
    let n = 4096;
    let mut g = c.benchmark_group("gemm");
    g.warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .sample_size(20);
    // The block-quantized types (float types have no integer GEMM micro-kernels).
    for ty in kiln_quant::supported_types()
        .into_iter()
        .filter(|t| t.block_elems() > 1)
    {
        let act = vec_dot_type(ty).expect("supported");
        let w4 = weights(ty, 4 * n);
        let w = &w4[..w4.len() / 4];
        for k in tables() {
            let row = n / act.block_elems() * act.block_bytes();
            let mut a = vec![0u8; 8 * row];
            for t in 0..8 {
                let x: Vec<f32> = acts(n + t).split_off(t);
                k.quantize_activations(act, &x, &mut a[t * row..(t + 1) * row])
                    .expect("quantize");
            }
            g.throughput(Throughput::Bytes(w.len() as u64));
            g.bench_with_input(
                BenchmarkId::new(format!("{}/dot8", ty.name()), k.isa()),
                &(),
                |b, _| b.iter(|| k.dot8(ty, black_box(w), black_box(&a)).expect("dot8")),
            );
            g.throughput(Throughput::Bytes(w4.len() as u64));
            g.bench_with_input(
                BenchmarkId::new(format!("{}/dotr4", ty.name()), k.isa()),
                &(),
                |b, _| {
                    b.iter(|| {
                        k.dotr4(ty, black_box(&w4), black_box(&a[..row]))
                            .expect("dotr4")
                    })
                },
            );
        }
    }
    g.finish();
}

fn bench_dequant(c: &mut Criterion) {
    let n = 4096;
    let mut g = c.benchmark_group("dequantize");
    g.warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .sample_size(20);
    for ty in kiln_quant::supported_types() {
        let w = weights(ty, n);
        let mut out = vec![0.0f32; n];
        g.throughput(Throughput::Bytes(w.len() as u64));
        for k in tables() {
            g.bench_with_input(BenchmarkId::new(ty.name(), k.isa()), &(), |b, _| {
                b.iter(|| {
                    k.dequantize(ty, black_box(&w), &mut out)
                        .expect("dequantize")
                })
            });
        }
    }
    g.finish();
}

fn bench_quantize(c: &mut Criterion) {
    let n = 4096;
    let x = acts(n);
    let mut g = c.benchmark_group("quantize");
    g.warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .sample_size(20);
    g.throughput(Throughput::Bytes((n * 4) as u64));
    for act in kiln_quant::activation_types() {
        for k in tables() {
            let mut out = vec![0u8; n / act.block_elems() * act.block_bytes()];
            g.bench_with_input(BenchmarkId::new(act.name(), k.isa()), &(), |b, _| {
                b.iter(|| {
                    k.quantize_activations(act, black_box(&x), &mut out)
                        .expect("q")
                })
            });
        }
    }
    g.finish();
}

fn bench_matmul(c: &mut Criterion) {
    let mut g = c.benchmark_group("matmul");
    g.warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(20);
    // Callers are expected to run inside the pool (`pool.install`): from outside, every
    // matmul pays a hand-off to the pool's threads and back.
    let all = rayon::ThreadPoolBuilder::new().build().expect("pool");
    let single = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .expect("pool");
    for ty in [GgmlType::Q4_1, GgmlType::Q8_0, GgmlType::Q5_0] {
        for (rows, cols) in [(576usize, 576usize), (1536, 576)] {
            let data = weights(ty, rows * cols);
            let w = QMatrix::new(ty, rows, cols, &data).expect("matrix");
            for n in [1usize, 64] {
                let x = acts(n * cols);
                let mut y = vec![0.0f32; n * rows];
                let mut s = MatmulScratch::default();
                g.throughput(Throughput::Elements((rows * cols * n) as u64));
                let id = format!("{}/{rows}x{cols}/n{n}", ty.name());
                g.bench_function(BenchmarkId::new(id.clone(), "all-threads"), |b| {
                    all.install(|| b.iter(|| matmul(&w, black_box(&x), n, &mut y, &mut s)))
                });
                g.bench_function(BenchmarkId::new(id, "1-thread"), |b| {
                    single.install(|| b.iter(|| matmul(&w, black_box(&x), n, &mut y, &mut s)))
                });
            }
        }
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default();
    targets = bench_dot, bench_gemm, bench_dequant, bench_quantize, bench_matmul
}
criterion_main!(benches);
