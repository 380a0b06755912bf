//! Random but valid quantized blocks: random quants under small, finite scales chosen so
//! that every weight is centred on zero and within about ±0.07 (real weights' range), so
//! activations stay finite through every layer of a random model.

use half::f16;
use kiln_format::GgmlType;
use rand::{Rng, RngExt};

fn put_f16(dst: &mut [u8], x: f32) {
    dst.copy_from_slice(&f16::from_f32(x).to_le_bytes());
}

/// Packs eight 6-bit (scale, min) pairs the way Q4_K and Q5_K store them in 12 bytes:
/// the low six bits of pairs 0–3 in bytes 0–7, pairs 4–7 split into a nibble in bytes 8–11
/// and their top two bits in the spare bits of bytes 0–7.
fn pack_k_scales(sc: &[u8; 8], m: &[u8; 8], dst: &mut [u8]) {
    for j in 0..4 {
        dst[j] = sc[j] | ((sc[j + 4] >> 4) << 6);
        dst[j + 4] = m[j] | ((m[j + 4] >> 4) << 6);
        dst[j + 8] = (sc[j + 4] & 0xF) | ((m[j + 4] & 0xF) << 4);
    }
}

/// A value in `lo..hi` picked by a random byte.
fn pick(byte: u8, lo: f32, hi: f32) -> f32 {
    lo + (hi - lo) * f32::from(byte) / 255.0
}

/// Fills `buf` (a whole number of blocks of `ty`) with random blocks. F32 is uniform in
/// ±0.02 (biases); norm weights are written by the caller. The scales are derived from the
/// block's own random bytes, so the random stream is one bulk fill.
pub fn fill(ty: GgmlType, rng: &mut impl Rng, buf: &mut [u8]) {
    if ty == GgmlType::F32 {
        for x in buf.chunks_exact_mut(4) {
            x.copy_from_slice(&rng.random_range(-0.02f32..0.02).to_le_bytes());
        }
        return;
    }
    rng.fill_bytes(buf);
    let block = ty.block_bytes();
    for b in buf.chunks_exact_mut(block) {
        match ty {
            // w = d·(q − 8), q ∈ 0..16.
            GgmlType::Q4_0 => {
                let d = pick(b[0], 0.002, 0.008);
                put_f16(&mut b[0..2], d);
            }
            // w = d·q, q ∈ −128..128.
            GgmlType::Q8_0 => {
                let d = pick(b[0], 1.5e-4, 5e-4);
                put_f16(&mut b[0..2], d);
            }
            // w = d·sc·q − dmin·m with q ∈ 0..16: m = 7.5·sc and dmin = d centre it.
            GgmlType::Q4_K => k_block(b, 7.5, 4, 5),
            // As Q4_K with q ∈ 0..32: m = 15.5·sc.
            GgmlType::Q5_K => k_block(b, 15.5, 2, 3),
            // w = d·sc·(q − 32), sc a signed byte: scales in 4..16.
            GgmlType::Q6_K => {
                for s in &mut b[192..208] {
                    *s = 4 + *s % 12;
                }
                let d = pick(b[208], 6e-5, 1.4e-4);
                put_f16(&mut b[208..210], d);
            }
            other => unreachable!("no quantization mix uses {}", other.name()),
        }
    }
}

/// A Q4_K/Q5_K block: d = dmin in 0.0006..0.0012, sub-block scales in
/// `sc_min..sc_min + sc_span`, each min `centre × scale` (so the weights centre on zero).
fn k_block(b: &mut [u8], centre: f32, sc_min: u8, sc_span: u8) {
    let d = pick(b[0], 0.0006, 0.0012);
    let sc: [u8; 8] = std::array::from_fn(|j| sc_min + b[4 + j] % sc_span);
    let m = sc.map(|s| (f32::from(s) * centre).round().min(63.0) as u8);
    put_f16(&mut b[0..2], d);
    put_f16(&mut b[2..4], d);
    pack_k_scales(&sc, &m, &mut b[4..16]);
}
