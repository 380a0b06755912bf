//! Weight tensors: looked up by their GGUF name, shape-checked once at load, then handed to
//! the kernels as [`QMatrix`] views.
//!
//! Architectures name tensors the GGUF way (`blk.3.attn_q.weight`) whatever the source: a
//! GGUF file is read as is; a Hugging Face safetensors checkpoint is read through the name
//! map of [`crate::hf`] (`model.layers.3.self_attn.q_proj.weight`). A weight matrix is a
//! view into the mapped file (GGUF in its stored type; safetensors F32/F16/BF16, which are
//! row-major like GGML), and only three things ever produce an owned copy: a transposed
//! GPT-2 `Conv1D` weight, a matrix quantized on load (`--quantize`), and vectors (norm
//! weights and biases, a few KB, always copied to f32).

use std::collections::HashMap;
use std::sync::Arc;

use kiln_format::{GgmlType, GgufFile, SafetensorsSet};
use kiln_quant::QMatrix;

use crate::ModelError;
use crate::hf::{HfNames, Transform};

/// Where a model's tensors come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SourceKind {
    /// A GGUF file (llama-family Q/K rows permuted for adjacent-pair RoPE by the converter).
    Gguf,
    /// A Hugging Face safetensors checkpoint (original rotate-half Q/K layout).
    Safetensors,
}

/// What the loader does to weight matrices.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoadOptions {
    /// Quantize every F32/F16/BF16 weight matrix to this type on load (Q8_0, Q4_0 or
    /// Q4_K). A matrix whose rows are not a whole number of the type's blocks falls back to
    /// Q8_0, or stays in its stored type when even that does not fit; each fallback is listed
    /// in [`crate::Model::load_notes`].
    pub quantize: Option<GgmlType>,
}

/// The bytes of a weight: a range of a mapped file, or an owned buffer.
#[derive(Clone, Debug)]
enum Bytes {
    /// `shard` is the index of the safetensors shard (0 for a GGUF file).
    Mapped {
        shard: usize,
        start: usize,
        len: usize,
    },
    Owned {
        buf: Arc<Vec<u8>>,
        start: usize,
        len: usize,
    },
}

/// A weight matrix (or vector) of the model: `rows` rows of `cols` elements.
#[derive(Clone, Debug)]
pub struct Weight {
    /// The name in the source file.
    pub name: String,
    pub ty: GgmlType,
    pub rows: usize,
    pub cols: usize,
    bytes: Bytes,
}

impl Weight {
    fn row_bytes(&self) -> usize {
        self.cols / self.ty.block_elems() * self.ty.block_bytes()
    }

    /// Rows `first..first + n` of this matrix, without copying (splits a fused QKV or
    /// gate+up projection into its parts).
    pub fn rows(&self, first: usize, n: usize) -> Result<Weight, ModelError> {
        if first + n > self.rows {
            return Err(ModelError::ShapeMismatch {
                tensor: self.name.clone(),
                expected: vec![self.cols as u64, (first + n) as u64],
                found: vec![self.cols as u64, self.rows as u64],
            });
        }
        let rb = self.row_bytes();
        let bytes = match &self.bytes {
            Bytes::Mapped { shard, start, .. } => Bytes::Mapped {
                shard: *shard,
                start: start + first * rb,
                len: n * rb,
            },
            Bytes::Owned { buf, start, .. } => Bytes::Owned {
                buf: Arc::clone(buf),
                start: start + first * rb,
                len: n * rb,
            },
        };
        Ok(Weight {
            name: self.name.clone(),
            ty: self.ty,
            rows: n,
            cols: self.cols,
            bytes,
        })
    }
}

/// The per-expert matrices of one projection of a mixture-of-experts layer, all of one
/// shape: views into a 3-D GGUF tensor ([`WeightStore::experts`]) or separately stored
/// per-expert matrices ([`ExpertMatrices::from_matrices`]).
#[derive(Clone, Debug)]
pub struct ExpertMatrices {
    experts: Vec<Weight>,
}

impl ExpertMatrices {
    /// Experts stored as separate matrices (a Hugging Face checkpoint's
    /// `experts.{e}.up_proj.weight`), in expert order; all must have one shape and type.
    pub fn from_matrices(experts: Vec<Weight>) -> Result<ExpertMatrices, ModelError> {
        if let Some(first) = experts.first()
            && let Some(odd) = experts
                .iter()
                .find(|w| (w.rows, w.cols, w.ty) != (first.rows, first.cols, first.ty))
        {
            return Err(ModelError::ShapeMismatch {
                tensor: odd.name.clone(),
                expected: vec![first.cols as u64, first.rows as u64],
                found: vec![odd.cols as u64, odd.rows as u64],
            });
        }
        Ok(ExpertMatrices { experts })
    }

    /// Number of experts.
    pub fn n_experts(&self) -> usize {
        self.experts.len()
    }

    /// Expert `e`'s matrix.
    pub fn get(&self, e: usize) -> Option<&Weight> {
        self.experts.get(e)
    }
}

/// A tensor found in the source: name in the file, type, GGML-order dims, bytes.
struct Found<'a> {
    name: String,
    ty: Option<GgmlType>,
    type_label: (u32, &'static str),
    dims: Vec<u64>,
    shard: usize,
    data: &'a [u8],
    transform: Transform,
}

enum Backing {
    Gguf(Arc<GgufFile>),
    Safetensors {
        set: Arc<SafetensorsSet>,
        names: HfNames,
        /// Tensors computed from the configuration (Llama-3 `rope_freqs`).
        extra: HashMap<String, Vec<f32>>,
    },
}

/// The tensors of one model, checked against the shapes an architecture expects.
pub struct WeightStore {
    backing: Backing,
    options: LoadOptions,
    notes: std::sync::Mutex<Vec<String>>,
}

impl WeightStore {
    pub fn gguf(file: Arc<GgufFile>, options: LoadOptions) -> Self {
        WeightStore {
            backing: Backing::Gguf(file),
            options,
            notes: Default::default(),
        }
    }

    pub(crate) fn safetensors(
        set: Arc<SafetensorsSet>,
        names: HfNames,
        extra: HashMap<String, Vec<f32>>,
        options: LoadOptions,
    ) -> Self {
        WeightStore {
            backing: Backing::Safetensors { set, names, extra },
            options,
            notes: Default::default(),
        }
    }

    pub fn kind(&self) -> SourceKind {
        match self.backing {
            Backing::Gguf(_) => SourceKind::Gguf,
            Backing::Safetensors { .. } => SourceKind::Safetensors,
        }
    }

    /// The GGUF file, for a GGUF source.
    pub fn gguf_file(&self) -> Option<&Arc<GgufFile>> {
        match &self.backing {
            Backing::Gguf(f) => Some(f),
            Backing::Safetensors { .. } => None,
        }
    }

    /// Bytes of tensor data in the source files.
    pub fn source_bytes(&self) -> u64 {
        match &self.backing {
            Backing::Gguf(f) => f.tensors().iter().map(|t| t.n_bytes).sum(),
            Backing::Safetensors { set, .. } => set.data_bytes(),
        }
    }

    /// What the loader did beyond mapping (quantization fallbacks, conversions).
    pub fn notes(&self) -> Vec<String> {
        self.notes.lock().map(|n| n.clone()).unwrap_or_default()
    }

    fn note(&self, s: String) {
        if let Ok(mut n) = self.notes.lock() {
            n.push(s);
        }
    }

    /// The name a canonical (GGUF) tensor name has in the source file, for messages.
    fn source_name(&self, name: &str) -> String {
        match &self.backing {
            Backing::Gguf(_) => name.to_string(),
            Backing::Safetensors { names, .. } => names
                .lookup(name)
                .and_then(|t| t.candidates.first().cloned())
                .unwrap_or_else(|| name.to_string()),
        }
    }

    fn find(&self, name: &str) -> Option<Found<'_>> {
        match &self.backing {
            Backing::Gguf(file) => {
                let info = file.tensor_info(name)?;
                Some(Found {
                    name: name.to_string(),
                    ty: Some(info.ty),
                    type_label: (info.ty.id(), info.ty.name()),
                    dims: trim_trailing_ones(&info.dims),
                    shard: 0,
                    data: file.tensor_data(info),
                    transform: Transform::None,
                })
            }
            Backing::Safetensors { set, names, .. } => {
                let t = names.lookup(name)?;
                let (hf_name, (shard, info)) = t
                    .candidates
                    .iter()
                    .find_map(|c| Some((c, set.locate(c)?)))?;
                let mut dims = info.ggml_dims();
                if dims.is_empty() {
                    dims.push(1);
                }
                Some(Found {
                    name: hf_name.clone(),
                    ty: info.dtype.ggml_type(),
                    type_label: (u32::MAX, info.dtype.name()),
                    dims: trim_trailing_ones(&dims),
                    shard,
                    data: set.shards()[shard].tensor_data(info),
                    transform: t.transform,
                })
            }
        }
    }

    /// Whether the source has a tensor of that (canonical) name.
    pub fn has(&self, name: &str) -> bool {
        self.extra(name).is_some() || self.find(name).is_some()
    }

    fn extra(&self, name: &str) -> Option<&Vec<f32>> {
        match &self.backing {
            Backing::Safetensors { extra, .. } => extra.get(name),
            Backing::Gguf(_) => None,
        }
    }

    /// `f` is in a type the kernels cannot compute with.
    /// The type of `f` if it has the `expected` dimensions (and a layout the caller can
    /// take: `layout_ok`) and a type the kernels support; the error naming the tensor
    /// otherwise.
    fn check_shape_and_type(
        &self,
        f: &Found,
        expected: Vec<u64>,
        layout_ok: bool,
    ) -> Result<GgmlType, ModelError> {
        if f.dims != expected || !layout_ok {
            return Err(ModelError::ShapeMismatch {
                tensor: f.name.clone(),
                expected,
                found: f.dims.clone(),
            });
        }
        match f.ty {
            Some(ty) if kiln_quant::is_supported(ty) => Ok(ty),
            _ => Err(self.unsupported(f)),
        }
    }

    fn unsupported(&self, f: &Found) -> ModelError {
        match self.kind() {
            SourceKind::Gguf => {
                ModelError::unsupported_ggml_type(f.name.clone(), f.type_label.0, f.type_label.1)
            }
            SourceKind::Safetensors => {
                ModelError::unsupported_dtype(f.name.clone(), f.type_label.1)
            }
        }
    }

    fn missing(&self, name: &str) -> ModelError {
        ModelError::MissingTensor {
            name: self.source_name(name),
        }
    }

    /// A matrix with `rows` rows of `cols` elements (GGUF dims `[cols, rows]`, safetensors
    /// shape `[rows, cols]`), in a type the kernels support.
    pub fn matrix(&self, name: &str, cols: usize, rows: usize) -> Result<Weight, ModelError> {
        let f = self.find(name).ok_or_else(|| self.missing(name))?;
        // A transposed source (GPT-2 Conv1D) stores [cols, rows] row-major. A one-row matrix
        // is stored as a vector (Qwen2-MoE's shared-expert gate, `[n_embd]`).
        let expected = trim_trailing_ones(&match f.transform {
            Transform::Transpose => vec![rows as u64, cols as u64],
            _ => vec![cols as u64, rows as u64],
        });
        let ty = self.check_shape_and_type(&f, expected, true)?;
        let mut w = match f.transform {
            Transform::Transpose => {
                let buf = transpose(f.data, ty.block_bytes(), cols, rows);
                let len = buf.len();
                Weight {
                    name: f.name,
                    ty,
                    rows,
                    cols,
                    bytes: Bytes::Owned {
                        buf: Arc::new(buf),
                        start: 0,
                        len,
                    },
                }
            }
            _ => {
                let start = self.offset_in_shard(f.shard, f.data);
                Weight {
                    name: f.name,
                    ty,
                    rows,
                    cols,
                    bytes: Bytes::Mapped {
                        shard: f.shard,
                        start,
                        len: f.data.len(),
                    },
                }
            }
        };
        if let Some(target) = self.options.quantize {
            w = self.quantize(w, target)?;
        }
        Ok(w)
    }

    /// The experts of a 3-D expert tensor (GGUF `blk.N.ffn_{gate,up,down}_exps.weight`, dims
    /// `[cols, rows, n_expert]`): one matrix of `rows` rows of `cols` elements per expert, each
    /// a byte range of the mapped tensor (expert `e`'s rows are contiguous, `e * rows` rows
    /// from the start), so nothing is copied. With `--quantize` the whole tensor is quantized
    /// once and the experts are ranges of that buffer.
    pub fn experts(
        &self,
        name: &str,
        cols: usize,
        rows: usize,
        n_expert: usize,
    ) -> Result<ExpertMatrices, ModelError> {
        let f = self.find(name).ok_or_else(|| self.missing(name))?;
        let expected = trim_trailing_ones(&[cols as u64, rows as u64, n_expert as u64]);
        let ty = self.check_shape_and_type(&f, expected, f.transform == Transform::None)?;
        let total_rows = rows.checked_mul(n_expert).ok_or_else(|| {
            ModelError::InvalidConfig(format!(
                "{name}: {n_expert} experts of {rows} rows overflow"
            ))
        })?;
        let start = self.offset_in_shard(f.shard, f.data);
        let mut all = Weight {
            name: f.name,
            ty,
            rows: total_rows,
            cols,
            bytes: Bytes::Mapped {
                shard: f.shard,
                start,
                len: f.data.len(),
            },
        };
        if let Some(target) = self.options.quantize {
            all = self.quantize(all, target)?;
        }
        let experts = (0..n_expert)
            .map(|e| {
                let mut w = all.rows(e * rows, rows)?;
                w.name = format!("{} (expert {e})", all.name);
                Ok(w)
            })
            .collect::<Result<Vec<_>, ModelError>>()?;
        Ok(ExpertMatrices { experts })
    }

    /// Byte offset of `data` (a tensor's bytes) within the whole mapped shard.
    fn offset_in_shard(&self, shard: usize, data: &[u8]) -> usize {
        let base = self.shard_bytes(shard).as_ptr() as usize;
        data.as_ptr() as usize - base
    }

    /// The whole mapped file a `Bytes::Mapped` range refers to.
    fn shard_bytes(&self, shard: usize) -> &[u8] {
        match &self.backing {
            Backing::Gguf(f) => f.as_bytes(),
            Backing::Safetensors { set, .. } => set.shards()[shard].as_bytes(),
        }
    }

    /// An optional matrix: `Ok(None)` when absent, an error when present but wrong.
    pub fn opt_matrix(
        &self,
        name: &str,
        cols: usize,
        rows: usize,
    ) -> Result<Option<Weight>, ModelError> {
        if self.find(name).is_some() {
            self.matrix(name, cols, rows).map(Some)
        } else {
            Ok(None)
        }
    }

    /// A vector of `n` f32 values (norm weights, biases), copied out of the file.
    pub fn vector(&self, name: &str, n: usize) -> Result<Vec<f32>, ModelError> {
        if let Some(v) = self.extra(name) {
            if v.len() != n {
                return Err(ModelError::ShapeMismatch {
                    tensor: name.to_string(),
                    expected: vec![n as u64],
                    found: vec![v.len() as u64],
                });
            }
            return Ok(v.clone());
        }
        let f = self.find(name).ok_or_else(|| self.missing(name))?;
        if f.dims != [n as u64] {
            return Err(ModelError::ShapeMismatch {
                tensor: f.name,
                expected: vec![n as u64],
                found: f.dims,
            });
        }
        let ty = f.ty.ok_or_else(|| self.unsupported(&f))?;
        let mut out = vec![0.0f32; n];
        kiln_quant::dequantize_row(ty, f.data, &mut out).map_err(|_| self.unsupported(&f))?;
        if f.transform == Transform::AddOne {
            out.iter_mut().for_each(|v| *v += 1.0);
        }
        Ok(out)
    }

    /// An optional vector: `Ok(None)` when absent.
    pub fn opt_vector(&self, name: &str, n: usize) -> Result<Option<Vec<f32>>, ModelError> {
        if self.has(name) {
            self.vector(name, n).map(Some)
        } else {
            Ok(None)
        }
    }

    /// The kernel view of a weight.
    pub fn view<'a>(&'a self, w: &'a Weight) -> Result<QMatrix<'a>, ModelError> {
        let data: &[u8] = match &w.bytes {
            Bytes::Mapped { shard, start, len } => self
                .shard_bytes(*shard)
                .get(*start..start + len)
                .unwrap_or(&[]),
            Bytes::Owned { buf, start, len } => buf.get(*start..start + len).unwrap_or(&[]),
        };
        qmatrix(w, data)
    }

    fn quantize(&self, w: Weight, target: GgmlType) -> Result<Weight, ModelError> {
        if !matches!(w.ty, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16) {
            return Ok(w);
        }
        let ty = match crate::quantize::fit(target, w.cols) {
            Some(t) if t == target => t,
            Some(t) => {
                self.note(format!(
                    "{}: rows of {} are not a whole number of {} blocks; quantized to {} instead",
                    w.name,
                    w.cols,
                    target.name(),
                    t.name()
                ));
                t
            }
            None => {
                self.note(format!(
                    "{}: rows of {} are not a whole number of {} blocks; kept as {}",
                    w.name,
                    w.cols,
                    target.name(),
                    w.ty.name()
                ));
                return Ok(w);
            }
        };
        let src = self.view(&w)?;
        let buf = crate::quantize::quantize_matrix(&src, ty)?;
        let len = buf.len();
        Ok(Weight {
            name: w.name,
            ty,
            rows: w.rows,
            cols: w.cols,
            bytes: Bytes::Owned {
                buf: Arc::new(buf),
                start: 0,
                len,
            },
        })
    }
}

fn qmatrix<'a>(w: &Weight, data: &'a [u8]) -> Result<QMatrix<'a>, ModelError> {
    QMatrix::new(w.ty, w.rows, w.cols, data).map_err(|e| match e {
        kiln_quant::QuantError::UnsupportedType { type_name, type_id } => {
            ModelError::unsupported_ggml_type(w.name.clone(), type_id, type_name)
        }
        other => ModelError::Quant(other),
    })
}

/// `src` holds `cols` rows of `rows` elements of `elem` bytes each (a `[in, out]` Conv1D
/// weight); returns it transposed to `rows` rows of `cols` elements.
fn transpose(src: &[u8], elem: usize, cols: usize, rows: usize) -> Vec<u8> {
    let mut out = vec![0u8; src.len()];
    for c in 0..cols {
        for r in 0..rows {
            let s = (c * rows + r) * elem;
            let d = (r * cols + c) * elem;
            out[d..d + elem].copy_from_slice(&src[s..s + elem]);
        }
    }
    out
}

fn trim_trailing_ones(dims: &[u64]) -> Vec<u64> {
    let mut d = dims.to_vec();
    while d.len() > 1 && d.last() == Some(&1) {
        d.pop();
    }
    d
}
