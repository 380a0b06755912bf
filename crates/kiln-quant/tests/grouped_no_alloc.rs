//! A caller that groups its matrices only for a few tokens (Q, K and V at decode) makes its
//! first grouped call after passes of more tokens, whose buffers already fit: with a
//! scratch sized for its groups, that call allocates nothing (counting allocator). One
//! test in its own process: the allocator counts every thread, the test harness's too.

#[path = "common/counting.rs"]
mod counting;

use kiln_quant::{GgmlType, MatmulGroup, MatmulScratch, QMatrix, matmul, matmul_grouped};

#[global_allocator]
static GLOBAL: counting::Counting = counting::Counting;

#[test]
fn a_first_grouped_call_after_larger_ungrouped_ones_allocates_nothing_when_sized_for_its_groups() {
    // Single-threaded pool so rayon's own bookkeeping is out of the picture: this checks
    // the drivers and the scratch.
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .expect("pool");
    let (ty, cols, rows) = (GgmlType::Q8_0, 640, 96);
    let data = vec![0x11u8; rows * cols / ty.block_elems() * ty.block_bytes()];
    let w = QMatrix::new(ty, rows, cols, &data).expect("matrix");
    let x = vec![0.25f32; 9 * cols];
    let mut y = [
        vec![0.0f32; 9 * rows],
        vec![0.0f32; 9 * rows],
        vec![0.0f32; 9 * rows],
    ];
    let mut s = MatmulScratch::with_group_capacity(3);
    // A pass of nine tokens: ungrouped (a prompt).
    pool.install(|| matmul(&w, &x, 9, &mut y[0], &mut s));
    let before = counting::allocations();
    pool.install(|| {
        // Then three tokens, then one, each with three matrices in one region.
        for n in [3usize, 1] {
            let group = |out| MatmulGroup {
                w,
                first: 0,
                n,
                out,
                out_row: 0,
            };
            s.prepare(&x[..n * cols], n, cols);
            let [a, b, c] = &mut y;
            let outs = [&mut a[..n * rows], &mut b[..n * rows], &mut c[..n * rows]];
            matmul_grouped(&[group(0), group(1), group(2)], &mut s, outs);
        }
    });
    let after = counting::allocations();
    assert_eq!(after - before, 0, "the grouped calls allocated");
}
