//! The AVX-512 table's Q4_K GEMV (four weight rows × one token): four single-row dots, one
//! row after another, each the table's own Q4_K `dot` (AVX2's), so the GEMV equals the dot
//! bit for bit by construction.
//!
//! At decode every weight byte comes from DRAM once per token, and on this class of core
//! (Zen 4, two threads sharing the memory bandwidth) a GEMV that reads one row as one
//! sequential stream finishes sooner than a four-row tile that walks four rows block by
//! block, even though the tile does less arithmetic per byte: the Llama-3.2-3B Q4_K_M shape,
//! tg64 at two threads, gave 16.0–17.4 t/s with this GEMV against 13.9–14.0 with the AVX2
//! four-row tile and 15.1–15.9 with an AVX-512 four-row tile that was 1.28× faster than the
//! AVX2 one in cache (docs/kernels.md, "Streaming the weights at decode").

use super::util::dotr4_by_dot;
use crate::arch::x86_64::avx2::kquants::dot_q4_k;

dotr4_by_dot!(dotr4_q4_k, dot_q4_k);
