//! Weight tensors: looked up by name, shape-checked once at load, then handed to the
//! kernels as [`QMatrix`] views over the mapped file. Weights are never copied to f32.

use std::sync::Arc;

use kiln_format::{GgmlType, GgufFile, TensorInfo};
use kiln_quant::QMatrix;

use crate::ModelError;

/// A weight matrix (or vector) of the model: `rows` rows of `cols` elements.
#[derive(Clone, Debug)]
pub struct Weight {
    pub name: String,
    pub ty: GgmlType,
    pub rows: usize,
    pub cols: usize,
    /// Index into the file's tensor table.
    index: usize,
}

/// The tensors of one GGUF file, checked against the shapes an architecture expects.
pub struct WeightStore {
    file: Arc<GgufFile>,
}

impl WeightStore {
    pub fn new(file: Arc<GgufFile>) -> Self {
        WeightStore { file }
    }

    /// The underlying file.
    pub fn file(&self) -> &GgufFile {
        &self.file
    }

    fn info(&self, name: &str) -> Result<(usize, &TensorInfo), ModelError> {
        self.file
            .tensors()
            .iter()
            .enumerate()
            .find(|(_, t)| t.name == name)
            .ok_or_else(|| ModelError::MissingTensor {
                name: name.to_string(),
            })
    }

    /// Whether the file has a tensor of that name.
    pub fn has(&self, name: &str) -> bool {
        self.file.tensor_info(name).is_some()
    }

    /// A matrix with `rows` rows of `cols` elements (GGUF dims `[cols, rows]`), in a type the
    /// kernels support.
    pub fn matrix(&self, name: &str, cols: usize, rows: usize) -> Result<Weight, ModelError> {
        let (index, info) = self.info(name)?;
        let expected = vec![cols as u64, rows as u64];
        let found: Vec<u64> = trim_trailing_ones(&info.dims);
        if found != expected {
            return Err(ModelError::ShapeMismatch {
                tensor: name.to_string(),
                expected,
                found: info.dims.clone(),
            });
        }
        if !kiln_quant::is_supported(info.ty) {
            return Err(ModelError::UnsupportedTensorType {
                tensor: name.to_string(),
                type_id: info.ty.id(),
                type_name: info.ty.name(),
            });
        }
        Ok(Weight {
            name: name.to_string(),
            ty: info.ty,
            rows,
            cols,
            index,
        })
    }

    /// An optional matrix: `Ok(None)` when absent, an error when present but wrong.
    pub fn opt_matrix(
        &self,
        name: &str,
        cols: usize,
        rows: usize,
    ) -> Result<Option<Weight>, ModelError> {
        if self.has(name) {
            self.matrix(name, cols, rows).map(Some)
        } else {
            Ok(None)
        }
    }

    /// A vector of `n` f32 values (norm weights, biases), copied out of the file.
    pub fn vector(&self, name: &str, n: usize) -> Result<Vec<f32>, ModelError> {
        let (_, info) = self.info(name)?;
        let found = trim_trailing_ones(&info.dims);
        if found != [n as u64] {
            return Err(ModelError::ShapeMismatch {
                tensor: name.to_string(),
                expected: vec![n as u64],
                found: info.dims.clone(),
            });
        }
        let mut out = vec![0.0f32; n];
        kiln_quant::dequantize_row(info.ty, self.file.tensor_data(info), &mut out).map_err(
            |_| ModelError::UnsupportedTensorType {
                tensor: name.to_string(),
                type_id: info.ty.id(),
                type_name: info.ty.name(),
            },
        )?;
        Ok(out)
    }

    /// The kernel view of a weight.
    pub fn view(&self, w: &Weight) -> Result<QMatrix<'_>, ModelError> {
        let data = self.file.tensor_data(&self.file.tensors()[w.index]);
        QMatrix::new(w.ty, w.rows, w.cols, data).map_err(|e| match e {
            kiln_quant::QuantError::UnsupportedType { type_name, type_id } => {
                ModelError::UnsupportedTensorType {
                    tensor: w.name.clone(),
                    type_id,
                    type_name,
                }
            }
            other => ModelError::Quant(other),
        })
    }
}

fn trim_trailing_ones(dims: &[u64]) -> Vec<u64> {
    let mut d = dims.to_vec();
    while d.len() > 1 && d.last() == Some(&1) {
        d.pop();
    }
    d
}
