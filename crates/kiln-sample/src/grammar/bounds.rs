//! Integer ranges → the grammar IR: the decimal texts of exactly the integers in
//! `[lo, hi]` (either end open), without leading zeros or `-0`, at most 16 digits as the
//! unbounded integer rule allows.

use super::ir::Expr;

/// Largest magnitude written (16 digits, as the plain integer rule).
pub(crate) const MAX_ABS: u64 = 9_999_999_999_999_999;

fn digit_class(lo: u8, hi: u8) -> Expr {
    if lo == hi {
        Expr::Literal(vec![lo])
    } else {
        Expr::class(&[(lo as char, hi as char)], false)
    }
}

/// Digit strings of one length, from `lo` to `hi` (same length, `lo <= hi`).
fn same_len(lo: &[u8], hi: &[u8]) -> Expr {
    if lo.is_empty() {
        return Expr::Empty;
    }
    if lo.iter().all(|&d| d == b'0') && hi.iter().all(|&d| d == b'9') {
        let n = lo.len() as u32;
        return Expr::repeat(digit_class(b'0', b'9'), n, Some(n));
    }
    let rest = lo.len() - 1;
    if lo[0] == hi[0] {
        return Expr::Seq(vec![
            Expr::Literal(vec![lo[0]]),
            same_len(&lo[1..], &hi[1..]),
        ]);
    }
    let nines = vec![b'9'; rest];
    let zeros = vec![b'0'; rest];
    let mut alts = vec![Expr::Seq(vec![
        Expr::Literal(vec![lo[0]]),
        same_len(&lo[1..], &nines),
    ])];
    if hi[0] - lo[0] > 1 {
        alts.push(Expr::Seq(vec![
            digit_class(lo[0] + 1, hi[0] - 1),
            Expr::repeat(digit_class(b'0', b'9'), rest as u32, Some(rest as u32)),
        ]));
    }
    alts.push(Expr::Seq(vec![
        Expr::Literal(vec![hi[0]]),
        same_len(&zeros, &hi[1..]),
    ]));
    Expr::Alt(alts)
}

/// Natural numbers from `a` to `b` (inclusive, `a <= b`).
fn naturals(a: u64, b: u64) -> Expr {
    let digits = |n: u64| n.to_string().len();
    let mut alts = Vec::new();
    for len in digits(a)..=digits(b) {
        let first = if len == 1 {
            0
        } else {
            10u64.pow(len as u32 - 1)
        };
        let last = 10u64.saturating_pow(len as u32).saturating_sub(1);
        let (lo, hi) = (a.max(first), b.min(last));
        if lo <= hi {
            alts.push(same_len(
                lo.to_string().as_bytes(),
                hi.to_string().as_bytes(),
            ));
        }
    }
    if alts.len() == 1 {
        alts.pop().unwrap_or(Expr::Empty)
    } else {
        Expr::Alt(alts)
    }
}

/// The integers in `[lo, hi]` (`None`: unbounded, i.e. 16 digits), or `None` when the
/// range is empty.
pub(crate) fn integers(lo: Option<i128>, hi: Option<i128>) -> Option<Expr> {
    let max = MAX_ABS as i128;
    let lo = lo.unwrap_or(-max).max(-max);
    let hi = hi.unwrap_or(max).min(max);
    if lo > hi {
        return None;
    }
    let mut alts = Vec::new();
    if lo < 0 {
        // Negatives -1 ..= -|lo| (magnitudes 1 ..= |lo| within the range).
        let (mlo, mhi) = ((-hi.min(-1)) as u64, (-lo) as u64);
        alts.push(Expr::Seq(vec![Expr::lit("-"), naturals(mlo, mhi)]));
    }
    if hi >= 0 {
        alts.push(naturals(lo.max(0) as u64, hi as u64));
    }
    Some(if alts.len() == 1 {
        alts.pop().unwrap_or(Expr::Empty)
    } else {
        Expr::Alt(alts)
    })
}
