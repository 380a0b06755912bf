//! The machine's memory read bandwidth, for decode's roofline: a multi-threaded sum over a
//! 1 GiB buffer (far beyond any cache), best of a few runs.

use std::time::Instant;

/// Bytes summed per run.
const BUFFER_BYTES: usize = 1 << 30;
const RUNS: usize = 4;

/// Read bandwidth in bytes/s with `threads` threads (best of [`RUNS`]), over `buf`.
fn probe(buf: &[u64], threads: usize) -> f64 {
    let chunk = buf.len().div_ceil(threads.max(1));
    let mut best = 0f64;
    for _ in 0..RUNS {
        let t0 = Instant::now();
        let total = std::thread::scope(|s| {
            let handles: Vec<_> = buf
                .chunks(chunk)
                .map(|part| s.spawn(move || sum(part)))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or(0))
                .fold(0u64, u64::wrapping_add)
        });
        std::hint::black_box(total);
        let secs = t0.elapsed().as_secs_f64();
        best = best.max(std::mem::size_of_val(buf) as f64 / secs.max(1e-9));
    }
    best
}

/// Eight independent accumulators, so the sum is limited by loads, not by one add chain.
fn sum(v: &[u64]) -> u64 {
    let mut acc = [0u64; 8];
    let mut blocks = v.chunks_exact(8);
    for b in &mut blocks {
        for (a, x) in acc.iter_mut().zip(b) {
            *a = a.wrapping_add(*x);
        }
    }
    let tail = blocks
        .remainder()
        .iter()
        .fold(0u64, |a, x| a.wrapping_add(*x));
    acc.iter().fold(tail, |a, x| a.wrapping_add(*x))
}

/// Read bandwidth (bytes/s) at each thread count in `threads`, over one 1 GiB buffer
/// (`quick`: 256 MiB, still beyond the caches of the machines this runs on).
pub fn read_bandwidth(threads: &[usize], quick: bool) -> Vec<(usize, f64)> {
    let bytes = if quick {
        BUFFER_BYTES / 4
    } else {
        BUFFER_BYTES
    };
    // Written, so every page is really mapped before it is read.
    let buf: Vec<u64> = (0..(bytes / 8) as u64).collect();
    threads.iter().map(|&t| (t, probe(&buf, t))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sum_covers_every_element_including_the_tail() {
        let v: Vec<u64> = (1..=21).collect();
        assert_eq!(sum(&v), 231);
        assert!(probe(&v, 3) > 0.0);
    }
}
