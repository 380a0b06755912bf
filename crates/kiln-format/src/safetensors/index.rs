//! Sharded checkpoints: `model.safetensors.index.json` names, for every tensor, the shard
//! file that holds it. [`SafetensorsSet`] opens a directory's single file or all its shards
//! and looks tensors up across them.

use std::collections::HashMap;
use std::path::Path;

use serde_json::Value;

use super::{SafetensorsFile, SafetensorsTensorInfo, SafetensorsTensorView};
use crate::{FormatError, Limits};

/// The index file of a sharded checkpoint.
pub const INDEX_FILE: &str = "model.safetensors.index.json";
/// The file of a single-file checkpoint.
pub const SINGLE_FILE: &str = "model.safetensors";

/// Largest index file read (a few hundred bytes per tensor; real ones are well under 1 MiB).
const MAX_INDEX_LEN: u64 = 64 << 20;

/// The parsed `weight_map` of an index file: tensor name → shard file name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardIndex {
    /// `(tensor, shard file)` pairs in key order.
    pub weight_map: Vec<(String, String)>,
}

impl ShardIndex {
    /// Parses an index file's text. `path` names it in errors.
    pub fn parse(text: &str, path: &Path) -> Result<ShardIndex, FormatError> {
        let bad = |reason: String| FormatError::BadShardIndex {
            path: path.to_path_buf(),
            reason,
        };
        let json: Value =
            serde_json::from_str(text).map_err(|e| bad(format!("not valid JSON: {e}")))?;
        let map = match json.get("weight_map") {
            Some(Value::Object(m)) => m,
            Some(_) => return Err(bad("'weight_map' is not an object".into())),
            None => return Err(bad("no 'weight_map'".into())),
        };
        let mut weight_map = Vec::with_capacity(map.len());
        for (tensor, file) in map {
            let Value::String(file) = file else {
                return Err(bad(format!(
                    "the shard of tensor '{tensor}' is not a string"
                )));
            };
            if !is_plain_file_name(file) {
                return Err(bad(format!(
                    "tensor '{tensor}' names shard '{file}', which is not a plain file name in the same directory"
                )));
            }
            weight_map.push((tensor.clone(), file.clone()));
        }
        Ok(ShardIndex { weight_map })
    }

    /// The distinct shard file names, sorted.
    pub fn shards(&self) -> Vec<&str> {
        let mut v: Vec<&str> = self.weight_map.iter().map(|(_, f)| f.as_str()).collect();
        v.sort_unstable();
        v.dedup();
        v
    }
}

/// A file name with no directory part: the index may not point outside its directory.
fn is_plain_file_name(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && !name.contains(['/', '\\', '\0'])
        && Path::new(name).file_name().is_some_and(|f| f == name)
}

/// All tensors of a checkpoint, from one file or from shards, looked up by name.
pub struct SafetensorsSet {
    shards: Vec<SafetensorsFile>,
    /// Tensor name → (shard, index into that shard's tensors).
    by_name: HashMap<String, (usize, usize)>,
}

impl SafetensorsSet {
    /// Opens the checkpoint in `dir`: the shards its `model.safetensors.index.json` lists,
    /// else its `model.safetensors`.
    pub fn open_dir(dir: impl AsRef<Path>) -> Result<SafetensorsSet, FormatError> {
        let dir = dir.as_ref();
        let index = dir.join(INDEX_FILE);
        if index.is_file() {
            return SafetensorsSet::open_index(&index);
        }
        let single = dir.join(SINGLE_FILE);
        if single.is_file() {
            return SafetensorsSet::from_files(vec![SafetensorsFile::open(&single)?]);
        }
        Err(FormatError::NoSafetensors {
            dir: dir.to_path_buf(),
        })
    }

    /// Opens the shards an index file lists (relative to the index's directory) and checks
    /// that each holds exactly the tensors the index assigns to it.
    pub fn open_index(index_path: impl AsRef<Path>) -> Result<SafetensorsSet, FormatError> {
        let index_path = index_path.as_ref();
        let text = read_bounded(index_path, MAX_INDEX_LEN)?;
        let index = ShardIndex::parse(&text, index_path)?;
        let limits = Limits::default();
        if index.weight_map.len() as u64 > limits.max_tensors {
            return Err(FormatError::LimitExceeded {
                what: "tensor count",
                key: "weight_map".into(),
                value: index.weight_map.len() as u64,
                limit: limits.max_tensors,
            });
        }
        let dir = index_path.parent().unwrap_or(Path::new("."));
        let names = index.shards();
        let shards = names
            .iter()
            .map(|f| SafetensorsFile::open(dir.join(f)))
            .collect::<Result<Vec<_>, _>>()?;
        let set = SafetensorsSet::from_files(shards)?;
        let bad = |reason: String| FormatError::BadShardIndex {
            path: index_path.to_path_buf(),
            reason,
        };
        for (tensor, file) in &index.weight_map {
            match set.by_name.get(tensor) {
                None => {
                    return Err(bad(format!(
                        "tensor '{tensor}' is listed in shard '{file}' but is not in it"
                    )));
                }
                Some(&(s, _)) if names[s] != file.as_str() => {
                    return Err(bad(format!(
                        "tensor '{tensor}' is listed in shard '{file}' but found in '{}'",
                        names[s]
                    )));
                }
                Some(_) => {}
            }
        }
        if set.by_name.len() != index.weight_map.len() {
            let listed: HashMap<&str, ()> = index
                .weight_map
                .iter()
                .map(|(t, _)| (t.as_str(), ()))
                .collect();
            let extra = set
                .names()
                .find(|n| !listed.contains_key(n))
                .unwrap_or_default()
                .to_owned();
            return Err(bad(format!(
                "shards hold tensor '{extra}', which the index does not list"
            )));
        }
        Ok(set)
    }

    /// A set over already opened files (one file, or shards). A tensor name that appears in
    /// two files is [`FormatError::DuplicateTensor`].
    pub fn from_files(shards: Vec<SafetensorsFile>) -> Result<SafetensorsSet, FormatError> {
        let mut by_name = HashMap::new();
        for (s, file) in shards.iter().enumerate() {
            for (i, t) in file.tensors().iter().enumerate() {
                if by_name.insert(t.name.clone(), (s, i)).is_some() {
                    return Err(FormatError::DuplicateTensor {
                        name: t.name.clone(),
                    });
                }
            }
        }
        Ok(SafetensorsSet { shards, by_name })
    }

    /// The files, in the order shard indices refer to.
    pub fn shards(&self) -> &[SafetensorsFile] {
        &self.shards
    }

    /// Number of tensors across all shards.
    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    /// Every tensor name (in no particular order).
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.by_name.keys().map(String::as_str)
    }

    /// The shard holding `name` and the tensor's info.
    pub fn locate(&self, name: &str) -> Option<(usize, &SafetensorsTensorInfo)> {
        self.by_name
            .get(name)
            .map(|&(s, i)| (s, &self.shards[s].tensors()[i]))
    }

    pub fn tensor_info(&self, name: &str) -> Option<&SafetensorsTensorInfo> {
        self.locate(name).map(|(_, t)| t)
    }

    /// The named tensor's info and bytes, or [`FormatError::MissingTensor`].
    pub fn tensor(&self, name: &str) -> Result<SafetensorsTensorView<'_>, FormatError> {
        let (s, info) = self
            .locate(name)
            .ok_or_else(|| FormatError::MissingTensor {
                name: name.to_owned(),
            })?;
        Ok(SafetensorsTensorView {
            info,
            data: self.shards[s].tensor_data(info),
        })
    }

    /// Total bytes of tensor data.
    pub fn data_bytes(&self) -> u64 {
        self.shards
            .iter()
            .flat_map(|f| f.tensors())
            .map(|t| t.n_bytes)
            .sum()
    }
}

impl std::fmt::Debug for SafetensorsSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SafetensorsSet")
            .field(
                "shards",
                &self.shards.iter().map(|s| s.path()).collect::<Vec<_>>(),
            )
            .field("tensors", &self.by_name.len())
            .finish()
    }
}

/// Reads a small text file, refusing one longer than `max` bytes.
pub(crate) fn read_bounded(path: &Path, max: u64) -> Result<String, FormatError> {
    let io = |source| FormatError::Io {
        path: path.to_path_buf(),
        source,
    };
    let len = std::fs::metadata(path).map_err(io)?.len();
    if len > max {
        return Err(FormatError::LimitExceeded {
            what: "file size",
            key: path.display().to_string(),
            value: len,
            limit: max,
        });
    }
    let bytes = std::fs::read(path).map_err(io)?;
    String::from_utf8(bytes).map_err(|_| FormatError::InvalidUtf8 {
        field: path.display().to_string(),
    })
}
