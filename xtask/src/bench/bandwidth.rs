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

/// The sum the probe times: explicit 256-bit loads where the machine has them. Left to the
/// auto-vectoriser, the same loop compiled to shuffles and gathers that ran at 2–11 GB/s
/// on a machine whose memory reads 24 GB/s per core, so the roofline came out too low.
fn sum(v: &[u64]) -> u64 {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: AVX2 is present (checked just above).
        return unsafe { sum_avx2(v) };
    }
    sum_portable(v)
}

/// Eight independent accumulators, so the sum is limited by loads, not by one add chain.
fn sum_portable(v: &[u64]) -> u64 {
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

/// Four 256-bit accumulators over 128-byte steps; the tail by [`sum_portable`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn sum_avx2(v: &[u64]) -> u64 {
    use std::arch::x86_64::*;
    let mut acc = [_mm256_setzero_si256(); 4];
    let mut steps = v.chunks_exact(16);
    for s in &mut steps {
        for (k, a) in acc.iter_mut().enumerate() {
            // SAFETY: `s` holds 16 `u64`s, so lanes 4k..4k + 4 are in bounds; unaligned load.
            let x = unsafe { _mm256_loadu_si256(s.as_ptr().add(4 * k).cast()) };
            *a = _mm256_add_epi64(*a, x);
        }
    }
    let total = _mm256_add_epi64(
        _mm256_add_epi64(acc[0], acc[1]),
        _mm256_add_epi64(acc[2], acc[3]),
    );
    let mut lanes = [0u64; 4];
    // SAFETY: `lanes` is 32 bytes; unaligned store.
    unsafe { _mm256_storeu_si256(lanes.as_mut_ptr().cast(), total) };
    lanes
        .iter()
        .fold(sum_portable(steps.remainder()), |a, x| a.wrapping_add(*x))
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
        assert_eq!(sum_portable(&v), 231);
        let w: Vec<u64> = (0..1000).map(|i| i * 7 + 3).collect();
        assert_eq!(sum(&w), w.iter().sum::<u64>());
        assert!(probe(&v, 3) > 0.0);
    }
}
