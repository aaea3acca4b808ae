//! `generation_config.json`: the token ids generation stops at and pads
//! with (`eos_token_id` may be one id or a list), and the sampling defaults
//! a checkpoint ships. A directory without the file has an empty config.

use std::path::Path;

use serde_json::{json, Value};

use super::{file_err, read_json};
use crate::error::Result;

/// The generation settings a checkpoint ships.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GenerationConfig {
    /// `bos_token_id`.
    pub bos_token_id: Option<i64>,
    /// `eos_token_id`: generation of a row stops after any of these.
    pub eos_token_ids: Vec<i64>,
    /// `pad_token_id`: what a finished row is filled with.
    pub pad_token_id: Option<i64>,
}

/// The file's name.
pub const FILE: &str = "generation_config.json";

impl GenerationConfig {
    /// Reads `dir/generation_config.json`; the empty config when there is none.
    pub fn from_dir(dir: &Path) -> Result<GenerationConfig> {
        let path = dir.join(FILE);
        if !path.exists() {
            return Ok(GenerationConfig::default());
        }
        Self::from_json(&path, &read_json(&path)?)
    }

    /// Parses the file's JSON (`path` names it in errors).
    pub fn from_json(path: &Path, v: &Value) -> Result<GenerationConfig> {
        if !v.is_object() {
            return Err(file_err(
                path,
                "generation_config.json must be a JSON object",
            ));
        }
        let ids = |name: &str| -> Result<Vec<i64>> {
            match v.get(name) {
                None | Some(Value::Null) => Ok(Vec::new()),
                Some(Value::Number(n)) => n
                    .as_i64()
                    .map(|i| vec![i])
                    .ok_or_else(|| file_err(path, format!("`{name}` {n} is not an integer id"))),
                Some(Value::Array(a)) => a
                    .iter()
                    .map(|x| {
                        x.as_i64().ok_or_else(|| {
                            file_err(path, format!("`{name}` holds {x}, not an integer id"))
                        })
                    })
                    .collect(),
                Some(other) => Err(file_err(
                    path,
                    format!("`{name}` must be an id or a list of ids, got {other}"),
                )),
            }
        };
        let one = |name: &str| -> Result<Option<i64>> {
            let v = ids(name)?;
            match v.len() {
                0 => Ok(None),
                1 => Ok(Some(v[0])),
                _ => Err(file_err(path, format!("`{name}` must be one id"))),
            }
        };
        Ok(GenerationConfig {
            bos_token_id: one("bos_token_id")?,
            eos_token_ids: ids("eos_token_id")?,
            pad_token_id: one("pad_token_id")?,
        })
    }

    /// The file's JSON.
    pub fn to_json(&self) -> Value {
        let mut v = json!({});
        if let Some(b) = self.bos_token_id {
            v["bos_token_id"] = json!(b);
        }
        match self.eos_token_ids.as_slice() {
            [] => {}
            [one] => v["eos_token_id"] = json!(one),
            many => v["eos_token_id"] = json!(many),
        }
        if let Some(p) = self.pad_token_id {
            v["pad_token_id"] = json!(p);
        }
        v
    }
}
