//! After a first call with a given size, matmul allocates nothing (counting allocator).

#[path = "common/counting.rs"]
mod counting;

use kiln_quant::{GgmlType, MatmulScratch, QMatrix, matmul};

#[global_allocator]
static GLOBAL: counting::Counting = counting::Counting;

#[test]
fn a_second_matmul_of_the_same_size_allocates_nothing() {
    // Single-threaded pool so rayon's own bookkeeping is out of the picture: this checks
    // the drivers and the scratch.
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .expect("pool");
    for (ty, cols) in [
        (GgmlType::Q4_1, 576),
        (GgmlType::Q4_K, 512),
        (GgmlType::Q8_0, 640),
    ] {
        let rows = 96;
        let data = vec![0x11u8; rows * cols / ty.block_elems() * ty.block_bytes()];
        let w = QMatrix::new(ty, rows, cols, &data).expect("matrix");
        for n in [1usize, 9] {
            let x = vec![0.25f32; n * cols];
            let mut y = vec![0.0f32; n * rows];
            let mut s = MatmulScratch::default();
            pool.install(|| matmul(&w, &x, n, &mut y, &mut s));
            let before = counting::allocations();
            pool.install(|| {
                matmul(&w, &x, n, &mut y, &mut s);
                matmul(&w, &x, n, &mut y, &mut s);
            });
            let after = counting::allocations();
            assert_eq!(after - before, 0, "{ty} n={n}: matmul allocated");
        }
    }
}
