//! A Hugging Face checkpoint directory: `model.safetensors`, or shards
//! named by `model.safetensors.index.json` (`{"weight_map": {key: file}}`).
//! Every shard is memory-mapped and its header validated when the
//! checkpoint opens, so a missing shard, an index naming a file that is not
//! there, a key the index places in a shard that lacks it, or a truncated
//! shard fails before any tensor is read, with an error naming the file and
//! the key.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use fucina_autograd::io::{SafetensorsFile, TensorInfo};
use fucina_core::{DType, ExecContext, RawTensor};
use serde_json::Value;

use super::{file_err, read_json};
use crate::error::Result;

/// The single-file checkpoint's name.
pub const SINGLE: &str = "model.safetensors";
/// The sharded checkpoint's index.
pub const INDEX: &str = "model.safetensors.index.json";

/// An opened checkpoint: its files and which holds each tensor.
#[derive(Debug)]
pub struct Checkpoint {
    files: Vec<SafetensorsFile<'static>>,
    keys: BTreeMap<String, usize>,
}

impl Checkpoint {
    /// Opens the checkpoint in `dir`: the index and its shards when
    /// [`INDEX`] exists, else [`SINGLE`].
    pub fn open(dir: &Path) -> Result<Checkpoint> {
        let index = dir.join(INDEX);
        if index.exists() {
            return Self::open_sharded(dir, &index);
        }
        let single = dir.join(SINGLE);
        if !single.exists() {
            return Err(file_err(
                dir,
                format!("no `{SINGLE}` and no `{INDEX}` in this directory"),
            ));
        }
        let file = SafetensorsFile::open(&single)?;
        let keys = file.names().map(|k| (k.to_string(), 0)).collect();
        Ok(Checkpoint {
            files: vec![file],
            keys,
        })
    }

    fn open_sharded(dir: &Path, index: &Path) -> Result<Checkpoint> {
        let v = read_json(index)?;
        let Some(map) = v.get("weight_map").and_then(Value::as_object) else {
            return Err(file_err(
                index,
                "`weight_map` (an object of key: file) is missing",
            ));
        };
        let mut shard_of: BTreeMap<&str, usize> = BTreeMap::new();
        let mut names: Vec<&str> = Vec::new();
        let mut keys = BTreeMap::new();
        for (key, file) in map {
            let Some(file) = file.as_str() else {
                return Err(file_err(
                    index,
                    format!("`weight_map.{key}` is not a file name"),
                ));
            };
            if file.is_empty() || file.contains(['/', '\\']) || file == "." || file == ".." {
                return Err(file_err(
                    index,
                    format!("`weight_map.{key}` names `{file}`, not a file in this directory"),
                ));
            }
            let n = names.len();
            let i = *shard_of.entry(file).or_insert(n);
            if i == n {
                names.push(file);
            }
            keys.insert(key.clone(), i);
        }
        if keys.is_empty() {
            return Err(file_err(index, "`weight_map` names no tensor"));
        }
        let mut files = Vec::with_capacity(names.len());
        for name in &names {
            let path = dir.join(name);
            if !path.is_file() {
                return Err(file_err(
                    index,
                    format!(
                        "names the shard `{name}`, which is not in {}",
                        dir.display()
                    ),
                ));
            }
            files.push(SafetensorsFile::open(&path)?);
        }
        for (key, &i) in &keys {
            if files[i].info(key).is_none() {
                return Err(file_err(
                    files[i].path(),
                    format!(
                        "the index places tensor `{key}` in this shard, which does not hold it"
                    ),
                ));
            }
        }
        for f in &files {
            if let Some(k) = f.names().find(|k| !keys.contains_key(*k)) {
                return Err(file_err(
                    f.path(),
                    format!("holds tensor `{k}`, which the index does not name"),
                ));
            }
        }
        Ok(Checkpoint { files, keys })
    }

    /// Every tensor key, sorted.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.keys.keys().map(String::as_str)
    }

    /// The number of tensors.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// True when the checkpoint holds no tensor.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The header entry of `key` and the file that holds it.
    pub fn info(&self, key: &str) -> Option<(&TensorInfo, &Path)> {
        let f = &self.files[*self.keys.get(key)?];
        Some((f.info(key)?, f.path()))
    }

    /// The file that holds `key`, or the first file (for errors about a missing key).
    pub fn path_of(&self, key: &str) -> PathBuf {
        let i = self.keys.get(key).copied().unwrap_or(0);
        self.files[i].path().to_path_buf()
    }

    /// Reads `key` converted to `dtype`.
    pub fn read_as(&self, ctx: &ExecContext, key: &str, dtype: DType) -> Result<RawTensor> {
        let Some(&i) = self.keys.get(key) else {
            return Err(file_err(&self.path_of(key), format!("no tensor `{key}`")));
        };
        Ok(self.files[i].read_as(ctx, key, dtype)?)
    }
}
