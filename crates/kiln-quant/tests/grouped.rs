//! The grouped matmul (several matrices over parts of one set of prepared rows, one parallel
//! region): every output is the dot kernel's bits, whatever the grouping, the ISA and the
//! number of threads; malformed groups are refused.

mod common;

use common::*;
use kiln_quant::{
    GATHER_ZERO, GgmlType, Kernels, MatmulGroup, MatmulScratch, QMatrix, group_starts_aligned,
    matmul_grouped, matmul_grouped_with, vec_dot_type,
};

const COLS: usize = 512;

struct Mat {
    ty: GgmlType,
    rows: usize,
    data: Vec<u8>,
}

impl Mat {
    fn new(ty: GgmlType, rows: usize, seed: u64) -> Mat {
        let data = random_weights(ty, rows * COLS / ty.block_elems(), &mut SeedRng::new(seed));
        Mat { ty, rows, data }
    }

    fn q(&self) -> QMatrix<'_> {
        QMatrix::new(self.ty, self.rows, COLS, &self.data).expect("matrix")
    }
}

/// Checks output `out` of group `g` against one dot kernel call per element.
fn assert_group_is_the_dot_kernel(
    k: &Kernels,
    g: &MatmulGroup,
    x: &[f32],
    out: &[f32],
    what: &str,
) {
    let act = vec_dot_type(g.w.ty()).expect("supported");
    let rows = g.w.rows();
    for i in 0..g.n {
        let t = g.first + i;
        let a = quantize(k, act, &x[t * COLS..(t + 1) * COLS]);
        for r in 0..rows {
            let d = k.dot(g.w.ty(), g.w.row(r), &a).expect("dot");
            let got = out[(g.out_row + i) * rows + r];
            assert_eq!(
                got.to_bits(),
                d.to_bits(),
                "{} {what}: {:?} row {t} output row {r}",
                k.isa(),
                g.w.ty()
            );
        }
    }
}

#[test]
fn grouped_outputs_equal_the_dot_kernel_bit_for_bit_on_every_isa_and_thread_count() {
    // Experts of two weight types (two activation types in one call) and two outputs.
    let a = Mat::new(GgmlType::Q4_K, 72, 1);
    let b = Mat::new(GgmlType::Q4_K, 72, 2);
    let c = Mat::new(GgmlType::Q6_K, 72, 3);
    let d = Mat::new(GgmlType::Q8_0, 40, 4);
    let n_rows = 40;
    let x = random_acts(n_rows * COLS, &mut SeedRng::new(5));
    // 13 rows from 0 (eight-token kernels and a remainder), 11 from 16, 3 from 27 (not on a
    // multiple of eight: fewer than eight rows), one row; and an empty group.
    let groups = [
        MatmulGroup {
            w: a.q(),
            first: 0,
            n: 13,
            out: 0,
            out_row: 0,
        },
        MatmulGroup {
            w: b.q(),
            first: 16,
            n: 11,
            out: 0,
            out_row: 16,
        },
        MatmulGroup {
            w: c.q(),
            first: 27,
            n: 3,
            out: 0,
            out_row: 27,
        },
        MatmulGroup {
            w: a.q(),
            first: 31,
            n: 0,
            out: 0,
            out_row: 31,
        },
        MatmulGroup {
            w: d.q(),
            first: 31,
            n: 1,
            out: 1,
            out_row: 0,
        },
        MatmulGroup {
            w: d.q(),
            first: 0,
            n: 9,
            out: 1,
            out_row: 1,
        },
    ];
    for k in tables() {
        for threads in [1, 2, 3] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .expect("pool");
            let mut y0 = vec![f32::NAN; n_rows * 72];
            let mut y1 = vec![f32::NAN; 10 * 40];
            let mut s = MatmulScratch::default();
            s.prepare(&x, n_rows, COLS);
            pool.install(|| matmul_grouped_with(k, &groups, &mut s, [&mut y0, &mut y1]));
            for (i, g) in groups.iter().enumerate() {
                let out = if g.out == 0 { &y0 } else { &y1 };
                let what = format!("{threads} threads, group {i}");
                assert_group_is_the_dot_kernel(k, g, &x, out, &what);
            }
        }
    }
}

#[test]
fn ragged_groups_read_padding_rows_but_write_only_their_own_outputs() {
    // Groups whose last tokens run wider kernels over the rows after them (a later group's
    // or the zero padding of the prepared rows): six and seven from a multiple of eight,
    // three anywhere, fourteen (eight and six), eleven (eight and three), and a seven that
    // ends at the last prepared row. Output rows between the groups are never written.
    let mats = [
        Mat::new(GgmlType::Q4_K, 36, 50),
        Mat::new(GgmlType::Q6_K, 36, 51),
        Mat::new(GgmlType::Q8_0, 36, 52),
    ];
    let n_rows = 95;
    let x = random_acts(n_rows * COLS, &mut SeedRng::new(53));
    let spans = [
        (0, 6),
        (8, 3),
        (16, 7),
        (24, 14),
        (40, 11),
        (53, 3),
        (64, 11),
        (88, 7),
    ];
    for (first, n) in spans {
        assert!(n < 3 || !group_starts_aligned(n) || first % 8 == 0);
    }
    for k in tables() {
        for m in &mats {
            let groups: Vec<MatmulGroup> = spans
                .iter()
                .map(|&(first, n)| MatmulGroup {
                    w: m.q(),
                    first,
                    n,
                    out: 0,
                    out_row: first,
                })
                .collect();
            for threads in [1, 2] {
                let pool = rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .build()
                    .expect("pool");
                let mut y = vec![f32::NAN; n_rows * 36];
                let mut s = MatmulScratch::default();
                s.prepare(&x, n_rows, COLS);
                pool.install(|| matmul_grouped_with(k, &groups, &mut s, [&mut y]));
                let what = format!("{threads} threads");
                for g in &groups {
                    assert_group_is_the_dot_kernel(k, g, &x, &y, &what);
                }
                for t in 0..n_rows {
                    if !spans.iter().any(|&(f, n)| (f..f + n).contains(&t)) {
                        assert!(
                            y[t * 36..(t + 1) * 36].iter().all(|v| v.is_nan()),
                            "{} {what} {:?}: row {t} of no group was written",
                            k.isa(),
                            m.ty
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn gathered_rows_are_prepared_as_the_same_rows_copied() {
    let m = Mat::new(GgmlType::Q4_K, 40, 60);
    let x = random_acts(5 * COLS, &mut SeedRng::new(61));
    let src = [
        3,
        0,
        GATHER_ZERO,
        GATHER_ZERO,
        4,
        1,
        1,
        2,
        0,
        3,
        GATHER_ZERO,
    ];
    let mut copied = Vec::new();
    for &r in &src {
        if r == GATHER_ZERO {
            copied.extend(std::iter::repeat_n(0.0f32, COLS));
        } else {
            let r = r as usize;
            copied.extend_from_slice(&x[r * COLS..(r + 1) * COLS]);
        }
    }
    let run = |prep: &dyn Fn(&mut MatmulScratch)| {
        let mut s = MatmulScratch::default();
        prep(&mut s);
        let mut y = vec![0.0f32; src.len() * 40];
        let g = MatmulGroup {
            w: m.q(),
            first: 0,
            n: src.len(),
            out: 0,
            out_row: 0,
        };
        matmul_grouped(&[g], &mut s, [&mut y]);
        y.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
    };
    let gathered = run(&|s| s.prepare_gathered(&x, COLS, &src));
    let plain = run(&|s| s.prepare(&copied, src.len(), COLS));
    assert_eq!(gathered, plain);
}

#[test]
#[should_panic(expected = "source row 5 of 5")]
fn a_gathered_row_past_the_source_is_refused() {
    let x = random_acts(5 * COLS, &mut SeedRng::new(62));
    MatmulScratch::default().prepare_gathered(&x, COLS, &[0, 5]);
}

#[test]
fn decode_groups_share_one_prepared_row() {
    let mats: Vec<Mat> = (0..8)
        .map(|e| Mat::new(GgmlType::Q4_K, 256, 10 + e))
        .collect();
    let x = random_acts(COLS, &mut SeedRng::new(20));
    let groups: Vec<MatmulGroup> = mats
        .iter()
        .enumerate()
        .map(|(j, m)| MatmulGroup {
            w: m.q(),
            first: 0,
            n: 1,
            out: 0,
            out_row: j,
        })
        .collect();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .expect("pool");
    let mut y = vec![f32::NAN; 8 * 256];
    let mut s = MatmulScratch::default();
    s.prepare(&x, 1, COLS);
    pool.install(|| matmul_grouped(&groups, &mut s, [&mut y]));
    for (j, g) in groups.iter().enumerate() {
        assert_group_is_the_dot_kernel(kiln_quant::kernels(), g, &x, &y, &format!("expert {j}"));
    }
}

#[test]
fn recycling_a_group_list_keeps_its_allocation_and_empties_it() {
    let m = Mat::new(GgmlType::Q8_0, 4, 30);
    let mut v = Vec::with_capacity(16);
    v.push(MatmulGroup {
        w: m.q(),
        first: 0,
        n: 1,
        out: 0,
        out_row: 0,
    });
    let cap = v.capacity();
    let r: Vec<MatmulGroup<'static>> = MatmulGroup::recycle(v);
    assert!(r.is_empty());
    assert_eq!(r.capacity(), cap);
}

fn run_one(groups: &[MatmulGroup], n_rows: usize, out_len: usize) {
    let x = random_acts(n_rows * COLS, &mut SeedRng::new(40));
    let mut s = MatmulScratch::default();
    s.prepare(&x, n_rows, COLS);
    let mut y = vec![0.0f32; out_len];
    matmul_grouped(groups, &mut s, [&mut y]);
}

#[test]
#[should_panic(expected = "overlap an earlier group's")]
fn groups_writing_the_same_output_rows_are_refused() {
    let m = Mat::new(GgmlType::Q8_0, 8, 41);
    let g = |first, out_row| MatmulGroup {
        w: m.q(),
        first,
        n: 2,
        out: 0,
        out_row,
    };
    run_one(&[g(0, 0), g(2, 1)], 4, 4 * 8);
}

#[test]
#[should_panic(expected = "not a multiple of 8")]
fn a_group_of_eight_rows_off_a_multiple_of_eight_is_refused() {
    let m = Mat::new(GgmlType::Q8_0, 8, 42);
    let g = MatmulGroup {
        w: m.q(),
        first: 3,
        n: 8,
        out: 0,
        out_row: 0,
    };
    run_one(&[g], 11, 8 * 8);
}

#[test]
#[should_panic(expected = "are not within the 4 prepared rows")]
fn a_group_past_the_prepared_rows_is_refused() {
    let m = Mat::new(GgmlType::Q8_0, 8, 43);
    let g = MatmulGroup {
        w: m.q(),
        first: 3,
        n: 2,
        out: 0,
        out_row: 0,
    };
    run_one(&[g], 4, 2 * 8);
}
