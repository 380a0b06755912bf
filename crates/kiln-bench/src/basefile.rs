//! The reference-logits file of `kiln perplexity --kl-base` / `--kl-divergence`.
//!
//! The body is byte for byte llama.cpp's `--kl-divergence-base` layout, so files move
//! between the two tools in both directions:
//!
//! ```text
//! "_logits_"  n_ctx:u32  n_vocab:i32  n_chunks:i32  tokens:i32[n_chunks·n_ctx]
//! per chunk, per scored position (n_ctx − 1 − n_ctx/2 of them): u16[row_len(n_vocab)]
//! ```
//!
//! (rows as in [`crate::kl::encode_row`]; all little-endian). Kiln appends a trailer that
//! names what produced the file — `JSON  json_len:u64  "KILNMETA"` — which llama.cpp never
//! reads; files without it (llama.cpp's) have no [`BaseMeta`].

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::BenchError;
use crate::kl::row_len;

const MAGIC: &[u8; 8] = b"_logits_";
const TRAILER_MAGIC: &[u8; 8] = b"KILNMETA";
/// Header bytes before the tokens: magic, n_ctx, n_vocab, n_chunks.
const HEADER_BYTES: u64 = 8 + 4 + 4 + 4;
/// The trailer's JSON is at most this long.
const MAX_META_BYTES: u64 = 1 << 20;

/// What Kiln records about the run that wrote a reference file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BaseMeta {
    /// The model as given (name or path).
    pub model: String,
    /// Its file name and size, to recognise it later.
    pub model_file: String,
    pub model_bytes: u64,
    /// Weight type summary of the model (e.g. `F32`, `Q4_1`).
    pub model_type: String,
    /// KV cache types of the run (e.g. `KV f16/f16`).
    #[serde(default)]
    pub kv: String,
    /// The text file the tokens came from.
    pub text: String,
    /// Whether the first token of each chunk was replaced by BOS.
    pub bos: Option<u32>,
    pub kiln_version: String,
}

/// The fixed part of a reference file.
#[derive(Clone, Debug, PartialEq)]
pub struct BaseHeader {
    pub n_ctx: usize,
    pub n_vocab: usize,
    pub n_chunks: usize,
    /// The evaluated tokens, `n_chunks · n_ctx` of them (each chunk's first token as in the
    /// text, before any BOS substitution).
    pub tokens: Vec<u32>,
}

impl BaseHeader {
    /// Scored positions (stored rows) per chunk.
    pub fn rows_per_chunk(&self) -> usize {
        self.n_ctx - 1 - self.n_ctx / 2
    }

    /// `u16`s per chunk of rows.
    pub fn chunk_len(&self) -> usize {
        self.rows_per_chunk() * row_len(self.n_vocab)
    }

    fn body_bytes(&self) -> u64 {
        HEADER_BYTES
            + 4 * self.tokens.len() as u64
            + 2 * self.chunk_len() as u64 * self.n_chunks as u64
    }
}

fn io_err(path: &Path) -> impl Fn(std::io::Error) -> BenchError + '_ {
    move |source| BenchError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Writes a reference file chunk by chunk.
pub struct BaseWriter {
    path: PathBuf,
    w: BufWriter<File>,
    chunk_len: usize,
    chunks_left: usize,
    bytes: Vec<u8>,
}

impl BaseWriter {
    /// Creates `path` and writes the header; `header.tokens` must hold `n_chunks · n_ctx`
    /// tokens.
    pub fn create(path: &Path, header: &BaseHeader) -> Result<BaseWriter, BenchError> {
        let bad = |detail: String| BenchError::BadBaseFile {
            path: path.to_path_buf(),
            detail,
        };
        if header.tokens.len() != header.n_ctx * header.n_chunks {
            return Err(bad(format!(
                "{} tokens for {} chunks of {}",
                header.tokens.len(),
                header.n_chunks,
                header.n_ctx
            )));
        }
        let as_i32 = |x: usize, what: &str| {
            i32::try_from(x).map_err(|_| bad(format!("{what} {x} does not fit the format")))
        };
        let err = io_err(path);
        let mut w = BufWriter::with_capacity(1 << 20, File::create(path).map_err(&err)?);
        w.write_all(MAGIC).map_err(&err)?;
        w.write_all(&(as_i32(header.n_ctx, "n_ctx")? as u32).to_le_bytes())
            .map_err(&err)?;
        w.write_all(&as_i32(header.n_vocab, "n_vocab")?.to_le_bytes())
            .map_err(&err)?;
        w.write_all(&as_i32(header.n_chunks, "n_chunks")?.to_le_bytes())
            .map_err(&err)?;
        let toks: Vec<u8> = header.tokens.iter().flat_map(|t| t.to_le_bytes()).collect();
        w.write_all(&toks).map_err(&err)?;
        Ok(BaseWriter {
            path: path.to_path_buf(),
            w,
            chunk_len: header.chunk_len(),
            chunks_left: header.n_chunks,
            bytes: Vec::new(),
        })
    }

    /// Appends one chunk's rows (`rows_per_chunk · row_len` values).
    pub fn write_chunk(&mut self, rows: &[u16]) -> Result<(), BenchError> {
        if rows.len() != self.chunk_len || self.chunks_left == 0 {
            return Err(BenchError::BadBaseFile {
                path: self.path.clone(),
                detail: format!(
                    "chunk of {} values where {} were expected ({} chunks left)",
                    rows.len(),
                    self.chunk_len,
                    self.chunks_left
                ),
            });
        }
        self.bytes.clear();
        self.bytes.extend(rows.iter().flat_map(|v| v.to_le_bytes()));
        self.w.write_all(&self.bytes).map_err(io_err(&self.path))?;
        self.chunks_left -= 1;
        Ok(())
    }

    /// Writes Kiln's trailer and flushes. Every chunk must have been written.
    pub fn finish(mut self, meta: &BaseMeta) -> Result<(), BenchError> {
        if self.chunks_left != 0 {
            return Err(BenchError::BadBaseFile {
                path: self.path.clone(),
                detail: format!("{} chunks were never written", self.chunks_left),
            });
        }
        let json = serde_json::to_vec(meta).map_err(|e| BenchError::BadBaseFile {
            path: self.path.clone(),
            detail: format!("cannot encode the trailer: {e}"),
        })?;
        let err = io_err(&self.path);
        self.w.write_all(&json).map_err(&err)?;
        self.w
            .write_all(&(json.len() as u64).to_le_bytes())
            .map_err(&err)?;
        self.w.write_all(TRAILER_MAGIC).map_err(&err)?;
        self.w.flush().map_err(&err)
    }
}

/// Reads a reference file (Kiln's or llama.cpp's) chunk by chunk.
pub struct BaseReader {
    path: PathBuf,
    r: BufReader<File>,
    header: BaseHeader,
    meta: Option<BaseMeta>,
    chunks_read: usize,
    bytes: Vec<u8>,
}

impl BaseReader {
    /// Opens `path`, checks that its size matches its header, and reads the tokens.
    pub fn open(path: &Path) -> Result<BaseReader, BenchError> {
        let err = io_err(path);
        let bad = |detail: String| BenchError::BadBaseFile {
            path: path.to_path_buf(),
            detail,
        };
        let mut f = File::open(path).map_err(&err)?;
        let size = f.metadata().map_err(&err)?.len();
        let mut head = [0u8; HEADER_BYTES as usize];
        if size < HEADER_BYTES {
            return Err(bad(format!("{size} bytes is too short for the header")));
        }
        f.read_exact(&mut head).map_err(&err)?;
        if &head[..8] != MAGIC {
            return Err(bad(
                "no \"_logits_\" magic: not a reference-logits file".into()
            ));
        }
        let word = |i: usize| u32::from_le_bytes([head[i], head[i + 1], head[i + 2], head[i + 3]]);
        let (n_ctx, n_vocab, n_chunks) = (word(8), word(12) as i32, word(16) as i32);
        if n_ctx < 4 || n_vocab < 1 || n_chunks < 1 {
            return Err(bad(format!(
                "n_ctx {n_ctx}, n_vocab {n_vocab}, n_chunks {n_chunks} are not a valid header"
            )));
        }
        let (n_ctx, n_vocab, n_chunks) = (n_ctx as usize, n_vocab as usize, n_chunks as usize);
        // Bound the token table by the file before allocating it.
        let n_tokens = n_ctx as u64 * n_chunks as u64;
        if HEADER_BYTES + 4 * n_tokens > size {
            return Err(bad(format!(
                "{n_chunks} chunks of {n_ctx} tokens do not fit in {size} bytes"
            )));
        }
        let mut tok_bytes = vec![0u8; 4 * n_tokens as usize];
        f.read_exact(&mut tok_bytes).map_err(&err)?;
        let tokens: Vec<u32> = tok_bytes
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        let header = BaseHeader {
            n_ctx,
            n_vocab,
            n_chunks,
            tokens,
        };
        if let Some(&t) = header.tokens.iter().find(|&&t| t as usize >= n_vocab) {
            return Err(bad(format!(
                "token {t} is outside the vocabulary of {n_vocab}"
            )));
        }
        let body = header.body_bytes();
        let meta = if size == body {
            None
        } else {
            Some(read_trailer(&mut f, body, size).map_err(bad)?)
        };
        f.seek(SeekFrom::Start(HEADER_BYTES + 4 * n_tokens))
            .map_err(&err)?;
        Ok(BaseReader {
            path: path.to_path_buf(),
            r: BufReader::with_capacity(1 << 20, f),
            header,
            meta,
            chunks_read: 0,
            bytes: Vec::new(),
        })
    }

    pub fn header(&self) -> &BaseHeader {
        &self.header
    }

    /// Kiln's trailer; `None` for llama.cpp's files.
    pub fn meta(&self) -> Option<&BaseMeta> {
        self.meta.as_ref()
    }

    /// Reads the next chunk's rows into `rows` (resized to [`BaseHeader::chunk_len`]).
    pub fn read_chunk(&mut self, rows: &mut Vec<u16>) -> Result<(), BenchError> {
        if self.chunks_read == self.header.n_chunks {
            return Err(BenchError::BadBaseFile {
                path: self.path.clone(),
                detail: format!("only {} chunks are stored", self.header.n_chunks),
            });
        }
        let n = self.header.chunk_len();
        self.bytes.resize(2 * n, 0);
        self.r
            .read_exact(&mut self.bytes)
            .map_err(io_err(&self.path))?;
        rows.clear();
        rows.extend(
            self.bytes
                .chunks_exact(2)
                .map(|b| u16::from_le_bytes([b[0], b[1]])),
        );
        self.chunks_read += 1;
        Ok(())
    }
}

fn read_trailer(f: &mut File, body: u64, size: u64) -> Result<BaseMeta, String> {
    if size < body + 16 {
        return Err(format!(
            "{size} bytes where the header calls for {body}: truncated or not matching its header"
        ));
    }
    let mut tail = [0u8; 16];
    f.seek(SeekFrom::Start(size - 16))
        .and_then(|_| f.read_exact(&mut tail))
        .map_err(|e| e.to_string())?;
    if &tail[8..] != TRAILER_MAGIC {
        return Err(format!(
            "{size} bytes where the header calls for {body}, and no Kiln trailer"
        ));
    }
    let mut len = [0u8; 8];
    len.copy_from_slice(&tail[..8]);
    let len = u64::from_le_bytes(len);
    if len > MAX_META_BYTES || body + len + 16 != size {
        return Err(format!(
            "a trailer of {len} bytes does not fit between {body} and {size}"
        ));
    }
    let mut json = vec![0u8; len as usize];
    f.seek(SeekFrom::Start(body))
        .and_then(|_| f.read_exact(&mut json))
        .map_err(|e| e.to_string())?;
    serde_json::from_slice(&json).map_err(|e| format!("unreadable trailer: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> BaseHeader {
        BaseHeader {
            n_ctx: 8,
            n_vocab: 5,
            n_chunks: 2,
            tokens: (0..16).map(|i| i % 5).collect(),
        }
    }

    fn meta() -> BaseMeta {
        BaseMeta {
            model: "m".into(),
            model_file: "m.gguf".into(),
            model_bytes: 1,
            model_type: "F32".into(),
            kv: "KV f16/f16".into(),
            text: "t.txt".into(),
            bos: Some(1),
            kiln_version: "0".into(),
        }
    }

    #[test]
    fn files_round_trip_with_the_trailer() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("base.kld");
        let h = header();
        // rows per chunk = 8 − 1 − 4 = 3; row_len(5) = 10.
        assert_eq!(h.chunk_len(), 30);
        let mut w = BaseWriter::create(&path, &h).expect("create");
        let c0: Vec<u16> = (0..30).collect();
        let c1: Vec<u16> = (100..130).collect();
        w.write_chunk(&c0).expect("chunk 0");
        w.write_chunk(&c1).expect("chunk 1");
        assert!(w.write_chunk(&c1).is_err(), "a third chunk does not fit");
        w.finish(&meta()).expect("finish");

        let mut r = BaseReader::open(&path).expect("open");
        assert_eq!(r.header(), &h);
        assert_eq!(r.meta(), Some(&meta()));
        let mut rows = Vec::new();
        r.read_chunk(&mut rows).expect("chunk 0");
        assert_eq!(rows, c0);
        r.read_chunk(&mut rows).expect("chunk 1");
        assert_eq!(rows, c1);
        assert!(r.read_chunk(&mut rows).is_err());
    }

    #[test]
    fn llama_cpp_files_without_a_trailer_are_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("llama.kld");
        let h = header();
        let mut bytes = b"_logits_".to_vec();
        for v in [8u32, 5, 2] {
            bytes.extend(v.to_le_bytes());
        }
        bytes.extend(h.tokens.iter().flat_map(|t| t.to_le_bytes()));
        bytes.extend((0..60u16).flat_map(|v| v.to_le_bytes()));
        std::fs::write(&path, &bytes).expect("write");
        let mut r = BaseReader::open(&path).expect("open");
        assert_eq!(r.meta(), None);
        let mut rows = Vec::new();
        r.read_chunk(&mut rows).expect("chunk 0");
        assert_eq!(rows, (0..30).collect::<Vec<u16>>());

        // One byte short: the size no longer matches the header.
        std::fs::write(&path, &bytes[..bytes.len() - 1]).expect("write");
        assert!(matches!(
            BaseReader::open(&path),
            Err(BenchError::BadBaseFile { .. })
        ));
        // A header claiming more tokens than the file holds is refused before allocating.
        let mut huge = bytes.clone();
        huge[16..20].copy_from_slice(&i32::MAX.to_le_bytes());
        std::fs::write(&path, &huge).expect("write");
        let e = BaseReader::open(&path).err().expect("refused");
        assert!(e.to_string().contains("do not fit"), "{e}");
        std::fs::write(&path, b"GGUF and more bytes here").expect("write");
        assert!(BaseReader::open(&path).is_err());
    }
}
