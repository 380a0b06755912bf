//! Sequence embeddings: how the final hidden states of a sequence (after the output norm,
//! before the LM head, as [`crate::Session::hidden_states`] returns them) become one
//! vector, and how that vector is normalised. The pooling kinds and the normalisation
//! numbers are llama.cpp's (`<arch>.pooling_type` in GGUF metadata, `embd_normalize`).

use kiln_format::Metadata;

use crate::ModelError;

/// How a sequence's per-token hidden states become its embedding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pooling {
    /// No pooling: one vector per token.
    None,
    /// The mean over the sequence's tokens.
    Mean,
    /// The first token's state.
    Cls,
    /// The last token's state.
    Last,
}

/// The pooling names [`Pooling::parse`] accepts.
pub const SUPPORTED_POOLING: &[&str] = &["none", "mean", "cls", "last"];

impl Pooling {
    /// llama.cpp's name of the pooling.
    pub fn name(self) -> &'static str {
        match self {
            Pooling::None => "none",
            Pooling::Mean => "mean",
            Pooling::Cls => "cls",
            Pooling::Last => "last",
        }
    }

    /// A pooling by name (`none`, `mean`, `cls`, `last`).
    pub fn parse(name: &str) -> Result<Pooling, ModelError> {
        match name {
            "none" => Ok(Pooling::None),
            "mean" => Ok(Pooling::Mean),
            "cls" => Ok(Pooling::Cls),
            "last" => Ok(Pooling::Last),
            other => Err(ModelError::UnsupportedPooling {
                pooling: other.to_string(),
                supported: SUPPORTED_POOLING,
            }),
        }
    }

    /// The pooling a model file declares in `<arch>.pooling_type` (llama.cpp's numbers:
    /// 0 none, 1 mean, 2 cls, 3 last; −1 or absent: `None`, not declared). A ranking
    /// head (4) or an unknown number is refused.
    pub fn declared(md: &Metadata) -> Result<Option<Pooling>, ModelError> {
        let Ok(arch) = md.str("general.architecture") else {
            return Ok(None);
        };
        let key = format!("{arch}.pooling_type");
        if !md.contains_key(&key) {
            return Ok(None);
        }
        let id = md.i64(&key)?;
        match id {
            -1 => Ok(None),
            0 => Ok(Some(Pooling::None)),
            1 => Ok(Some(Pooling::Mean)),
            2 => Ok(Some(Pooling::Cls)),
            3 => Ok(Some(Pooling::Last)),
            4 => Err(ModelError::UnsupportedPooling {
                pooling: format!("rank ({key} = 4)"),
                supported: SUPPORTED_POOLING,
            }),
            n => Err(ModelError::UnsupportedPooling {
                pooling: format!("{key} = {n}"),
                supported: SUPPORTED_POOLING,
            }),
        }
    }

    /// Pools `hidden` (`n_tokens × d`, token-major) into the vectors of this pooling:
    /// one of `d` values, or for [`Pooling::None`] the `n_tokens` rows themselves.
    /// Empty when there is no token.
    pub fn pool(self, hidden: &[f32], d: usize) -> Vec<Vec<f32>> {
        if d == 0 || hidden.len() < d {
            return Vec::new();
        }
        let rows = hidden.chunks_exact(d);
        match self {
            Pooling::None => rows.map(<[f32]>::to_vec).collect(),
            Pooling::Cls => rows.take(1).map(<[f32]>::to_vec).collect(),
            Pooling::Last => rows.last().map(<[f32]>::to_vec).into_iter().collect(),
            Pooling::Mean => {
                let n = rows.len();
                let mut sum = vec![0.0f64; d];
                for row in rows {
                    for (s, &v) in sum.iter_mut().zip(row) {
                        *s += f64::from(v);
                    }
                }
                vec![sum.iter().map(|&s| (s / n as f64) as f32).collect()]
            }
        }
    }
}

/// Normalises `v` in place as llama.cpp's `embd_normalize` says: −1 none, 0 scaled so the
/// largest magnitude is 32760 (the int16 range), 1 taxicab, 2 Euclidean (L2), `p > 2` the
/// p-norm. A zero vector stays zero. Other negative values are refused by the caller.
pub fn normalize(v: &mut [f32], embd_normalize: i32) {
    let sum: f64 = match embd_normalize {
        -1 => 1.0,
        0 => v.iter().fold(0.0f64, |m, &x| m.max(f64::from(x.abs()))) / 32760.0,
        2 => v
            .iter()
            .map(|&x| f64::from(x) * f64::from(x))
            .sum::<f64>()
            .sqrt(),
        p => {
            let p = f64::from(p);
            v.iter()
                .map(|&x| f64::from(x.abs()).powf(p))
                .sum::<f64>()
                .powf(1.0 / p)
        }
    };
    let scale = if sum > 0.0 { (1.0 / sum) as f32 } else { 0.0 };
    v.iter_mut().for_each(|x| *x *= scale);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mean_cls_and_last_pick_what_their_names_say() {
        let h = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        assert_eq!(Pooling::Mean.pool(&h, 2), vec![vec![3.0, 4.0]]);
        assert_eq!(Pooling::Cls.pool(&h, 2), vec![vec![1.0, 2.0]]);
        assert_eq!(Pooling::Last.pool(&h, 2), vec![vec![5.0, 6.0]]);
        assert_eq!(Pooling::None.pool(&h, 2).len(), 3);
        assert!(Pooling::Mean.pool(&[], 2).is_empty());
    }

    #[test]
    fn euclidean_normalisation_gives_unit_length_and_leaves_zero_alone() {
        let mut v = [3.0, 4.0];
        normalize(&mut v, 2);
        assert_eq!(v, [0.6, 0.8]);
        let mut z = [0.0, 0.0];
        normalize(&mut z, 2);
        assert_eq!(z, [0.0, 0.0]);
        let mut t = [1.0, -3.0];
        normalize(&mut t, 1);
        assert_eq!(t, [0.25, -0.75]);
        let mut m = [0.5, -1.0];
        normalize(&mut m, 0);
        assert_eq!(m, [16380.0, -32760.0]);
    }

    #[test]
    fn a_declared_pooling_is_read_and_a_ranking_head_is_refused() {
        let mut md = Metadata::default();
        md.set("general.architecture", "bert");
        assert_eq!(Pooling::declared(&md).unwrap(), None);
        md.set("bert.pooling_type", 1u32);
        assert_eq!(Pooling::declared(&md).unwrap(), Some(Pooling::Mean));
        md.set("bert.pooling_type", 4u32);
        let e = Pooling::declared(&md).unwrap_err().to_string();
        assert!(e.contains("rank"), "{e}");
        assert!(
            Pooling::parse("max")
                .unwrap_err()
                .to_string()
                .contains("mean")
        );
    }
}
