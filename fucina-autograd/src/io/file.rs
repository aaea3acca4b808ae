//! A safetensors file read through a memory map, its header validated up front.
//!
//! Format: an 8-byte little-endian header length `n`, `n` bytes of JSON
//! mapping each tensor name to `{dtype, shape, data_offsets: [begin, end]}`
//! (offsets relative to the byte after the header) plus an optional
//! `__metadata__` map of strings, then the data. [`SafetensorsFile`] parses
//! the header itself (rather than through the `safetensors` crate) so that
//! each problem names the tensor it concerns: an entry whose byte range runs
//! past the end of a truncated file, whose length does not match its shape,
//! or whose dtype fucina has not. Every entry is checked when the file is
//! opened, so a load can validate all keys before reading any data. A key
//! named twice in the header is an error (not "last wins"), and the byte
//! ranges must tile the data exactly, as the format requires: no overlap,
//! no hole, no trailing byte.
//!
//! Data is little-endian, as on every host fucina builds for (x86-64,
//! aarch64); a tensor is copied once, from the map into a pooled buffer.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use fucina_core::{DType, ExecContext, RawTensor};

use super::fs::{map_file, MappedFile};
use super::StateDictError;
use crate::error::Result;

/// One tensor entry of a safetensors header.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorInfo {
    /// The stored dtype, `None` for a safetensors dtype fucina has not
    /// (BOOL, I8, I16, U16, U64, F8_*).
    pub dtype: Option<DType>,
    /// The stored dtype as the file spells it (`"F32"`, `"BF16"`, ...).
    pub dtype_name: String,
    /// The shape.
    pub shape: Vec<usize>,
    /// Absolute byte range of the data in the file.
    range: (usize, usize),
}

enum Data<'a> {
    Map(MappedFile),
    Slice(&'a [u8]),
}

impl Data<'_> {
    fn bytes(&self) -> &[u8] {
        match self {
            Data::Map(m) => m,
            Data::Slice(s) => s,
        }
    }
}

/// A safetensors file (memory-mapped) or buffer whose header has been
/// parsed and every entry validated.
pub struct SafetensorsFile<'a> {
    path: PathBuf,
    data: Data<'a>,
    entries: BTreeMap<String, TensorInfo>,
    metadata: BTreeMap<String, String>,
}

impl std::fmt::Debug for SafetensorsFile<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SafetensorsFile")
            .field("path", &self.path)
            .field("tensors", &self.entries.len())
            .finish()
    }
}

/// Size in bytes of one element of a safetensors dtype, and fucina's dtype.
fn st_dtype(name: &str) -> Option<(usize, Option<DType>)> {
    Some(match name {
        "F64" => (8, Some(DType::F64)),
        "F32" => (4, Some(DType::F32)),
        "F16" => (2, Some(DType::F16)),
        "BF16" => (2, Some(DType::BF16)),
        "I64" => (8, Some(DType::I64)),
        "I32" => (4, Some(DType::I32)),
        "U32" => (4, Some(DType::U32)),
        "U8" => (1, Some(DType::U8)),
        "U64" => (8, None),
        "I16" | "U16" => (2, None),
        "I8" | "BOOL" | "F8_E4M3" | "F8_E5M2" => (1, None),
        _ => return None,
    })
}

/// safetensors' dtype for a fucina dtype (every fucina dtype has one): what
/// a writer of safetensors files (`safetensors::serialize`) names it.
pub fn st_name(d: DType) -> safetensors::Dtype {
    use safetensors::Dtype as S;
    match d {
        DType::F32 => S::F32,
        DType::F64 => S::F64,
        DType::F16 => S::F16,
        DType::BF16 => S::BF16,
        DType::I32 => S::I32,
        DType::I64 => S::I64,
        DType::U32 => S::U32,
        DType::U8 => S::U8,
    }
}

impl SafetensorsFile<'static> {
    /// Opens and memory-maps `path`, then parses and validates its header.
    ///
    /// The map is read-only; the file must not be modified in place while
    /// it is open (fucina itself only ever replaces files by rename, which
    /// leaves an open map on the old contents).
    pub fn open(path: &Path) -> Result<SafetensorsFile<'static>> {
        // The workspace's one memory-map opener (`io/fs.rs`).
        let map = map_file(path)?;
        if map.len() < 8 {
            return Err(format_err(
                path,
                format!(
                    "the file is {} bytes, shorter than the 8-byte header length",
                    map.len()
                ),
            ));
        }
        Self::parse(path.to_path_buf(), Data::Map(map))
    }
}

impl<'a> SafetensorsFile<'a> {
    /// Parses safetensors bytes held in memory; `label` stands for the file
    /// name in errors.
    pub fn from_bytes(label: impl Into<PathBuf>, bytes: &'a [u8]) -> Result<SafetensorsFile<'a>> {
        Self::parse(label.into(), Data::Slice(bytes))
    }

    fn parse(path: PathBuf, data: Data<'a>) -> Result<SafetensorsFile<'a>> {
        let bytes = data.bytes();
        let total = bytes.len();
        if total < 8 {
            return Err(format_err(
                &path,
                format!("the file is {total} bytes, shorter than the 8-byte header length"),
            ));
        }
        let mut n8 = [0u8; 8];
        n8.copy_from_slice(&bytes[..8]);
        let n = u64::from_le_bytes(n8);
        if n > (total - 8) as u64 {
            return Err(format_err(
                &path,
                format!(
                    "header length {n} exceeds the {} bytes after it (truncated, or not safetensors)",
                    total - 8
                ),
            ));
        }
        let n = n as usize;
        let header = &bytes[8..8 + n];
        if header.first() != Some(&b'{') {
            return Err(format_err(&path, "the header is not a JSON object"));
        }
        let HeaderEntries(json) = serde_json::from_slice(header)
            .map_err(|e| format_err(&path, format!("the header is not valid JSON: {e}")))?;
        let data_start = 8 + n;
        let data_len = total - data_start;
        let mut entries = BTreeMap::new();
        let mut metadata = BTreeMap::new();
        let mut seen = std::collections::HashSet::with_capacity(json.len());
        for (name, v) in json {
            // serde_json keeps the last of two equal keys: a file naming a
            // tensor twice is ambiguous, so it is refused.
            if !seen.insert(name.clone()) {
                return Err(tensor_err(&path, &name, "the header names this key twice"));
            }
            if name == "__metadata__" {
                let Some(obj) = v.as_object() else {
                    return Err(format_err(&path, "`__metadata__` is not a map of strings"));
                };
                for (k, v) in obj {
                    let Some(s) = v.as_str() else {
                        return Err(format_err(
                            &path,
                            format!("`__metadata__.{k}` is not a string"),
                        ));
                    };
                    metadata.insert(k.clone(), s.to_string());
                }
                continue;
            }
            let info = parse_entry(&v, data_start, data_len)
                .map_err(|message| tensor_err(&path, &name, message))?;
            entries.insert(name, info);
        }
        check_tiling(&path, &entries, data_start, data_len)?;
        Ok(SafetensorsFile {
            path,
            data,
            entries,
            metadata,
        })
    }

    /// The file's path (or the label given to [`from_bytes`](Self::from_bytes)).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The tensor names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.entries.keys().map(|k| k.as_str())
    }

    /// How many tensors the file holds.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the file holds no tensor.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The header entry of `name`, if present.
    pub fn info(&self, name: &str) -> Option<&TensorInfo> {
        self.entries.get(name)
    }

    /// The `__metadata__` map.
    pub fn metadata(&self) -> &BTreeMap<String, String> {
        &self.metadata
    }

    fn entry(&self, name: &str) -> Result<&TensorInfo> {
        self.entries
            .get(name)
            .ok_or_else(|| tensor_err(&self.path, name, "no such tensor in the file"))
    }

    /// The stored bytes of `name` (little-endian).
    pub fn bytes(&self, name: &str) -> Result<&[u8]> {
        let e = self.entry(name)?;
        Ok(&self.data.bytes()[e.range.0..e.range.1])
    }

    /// Reads `name` in its stored dtype into a pooled tensor.
    pub fn read(&self, ctx: &ExecContext, name: &str) -> Result<RawTensor> {
        let e = self.entry(name)?;
        let Some(dt) = e.dtype else {
            return Err(tensor_err(
                &self.path,
                name,
                format!("dtype {} is not supported by fucina", e.dtype_name),
            ));
        };
        let mut t = ctx.empty(dt, &e.shape)?;
        let dst: &mut [u8] = fucina_core::dispatch_any!(dt, T => bytemuck::cast_slice_mut::<T, u8>(t.as_mut_slice::<T>()?));
        let src = &self.data.bytes()[e.range.0..e.range.1];
        if dst.len() != src.len() {
            return Err(tensor_err(
                &self.path,
                name,
                format!("{} bytes stored, {} expected", src.len(), dst.len()),
            ));
        }
        dst.copy_from_slice(src);
        Ok(t)
    }

    /// Reads `name` converted to `dtype` (a plain read when it matches).
    pub fn read_as(&self, ctx: &ExecContext, name: &str, dtype: DType) -> Result<RawTensor> {
        let t = self.read(ctx, name)?;
        if t.dtype() == dtype {
            return Ok(t);
        }
        Ok(ctx.to_dtype(&t, dtype)?)
    }
}

fn parse_entry(
    v: &serde_json::Value,
    data_start: usize,
    data_len: usize,
) -> std::result::Result<TensorInfo, String> {
    let obj = v.as_object().ok_or("the header entry is not an object")?;
    let dtype_name = obj
        .get("dtype")
        .and_then(|d| d.as_str())
        .ok_or("the header entry has no `dtype` string")?;
    let (size, dtype) =
        st_dtype(dtype_name).ok_or_else(|| format!("unknown dtype `{dtype_name}`"))?;
    let shape = obj
        .get("shape")
        .and_then(|s| s.as_array())
        .ok_or("the header entry has no `shape` array")?
        .iter()
        .map(|d| d.as_u64().and_then(|d| usize::try_from(d).ok()))
        .collect::<Option<Vec<usize>>>()
        .ok_or("`shape` holds something other than non-negative integers")?;
    let offs = obj
        .get("data_offsets")
        .and_then(|s| s.as_array())
        .filter(|a| a.len() == 2)
        .ok_or("the header entry has no `data_offsets` pair")?;
    let (Some(b), Some(e)) = (offs[0].as_u64(), offs[1].as_u64()) else {
        return Err("`data_offsets` are not non-negative integers".into());
    };
    if b > e {
        return Err(format!("data_offsets [{b}, {e}) are reversed"));
    }
    let bytes = shape
        .iter()
        .try_fold(size, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| format!("shape {shape:?} overflows"))?;
    if (e - b) as u128 != bytes as u128 {
        return Err(format!(
            "{dtype_name} {shape:?} needs {bytes} bytes but data_offsets [{b}, {e}) hold {}",
            e - b
        ));
    }
    if e > data_len as u64 {
        return Err(format!(
            "its bytes [{b}, {e}) run past the end of the data ({data_len} bytes): the file is truncated"
        ));
    }
    Ok(TensorInfo {
        dtype,
        dtype_name: dtype_name.to_string(),
        shape,
        range: (data_start + b as usize, data_start + e as usize),
    })
}

/// The header's top-level entries in file order, duplicates kept (a
/// `serde_json::Map` would keep only the last of two equal keys).
struct HeaderEntries(Vec<(String, serde_json::Value)>);

impl<'de> serde::Deserialize<'de> for HeaderEntries {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = HeaderEntries;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<M: serde::de::MapAccess<'de>>(
                self,
                mut m: M,
            ) -> std::result::Result<HeaderEntries, M::Error> {
                let mut out = Vec::new();
                while let Some(e) = m.next_entry::<String, serde_json::Value>()? {
                    out.push(e);
                }
                Ok(HeaderEntries(out))
            }
        }
        d.deserialize_map(V)
    }
}

/// The safetensors rule on byte ranges (as the reference implementation
/// enforces it): sorted by offset, the tensors' ranges tile the data from 0
/// to its end, with no overlap, no hole and no trailing byte.
fn check_tiling(
    path: &Path,
    entries: &BTreeMap<String, TensorInfo>,
    data_start: usize,
    data_len: usize,
) -> Result<()> {
    let mut ranges: Vec<(usize, usize, &str)> = entries
        .iter()
        .map(|(n, e)| (e.range.0, e.range.1, n.as_str()))
        .collect();
    ranges.sort_unstable();
    let mut at = data_start;
    let mut prev: Option<&str> = None;
    for (b, e, name) in ranges {
        if b < at {
            let other = prev.unwrap_or("?");
            return Err(tensor_err(
                path,
                name,
                format!(
                    "data_offsets [{}, {}) overlap those of `{other}`",
                    b - data_start,
                    e - data_start
                ),
            ));
        }
        if b > at {
            return Err(tensor_err(
                path,
                name,
                format!(
                    "data_offsets [{}, {}) leave the bytes [{}, {}) before them to no tensor",
                    b - data_start,
                    e - data_start,
                    at - data_start,
                    b - data_start
                ),
            ));
        }
        at = e;
        prev = Some(name);
    }
    if at != data_start + data_len {
        return Err(format_err(
            path,
            format!(
                "the tensors end at byte {} of the data but it holds {data_len} bytes",
                at - data_start
            ),
        ));
    }
    Ok(())
}

fn format_err(path: &Path, message: impl Into<String>) -> crate::Error {
    StateDictError::Format {
        file: path.to_path_buf(),
        message: message.into(),
    }
    .into()
}

fn tensor_err(path: &Path, tensor: &str, message: impl Into<String>) -> crate::Error {
    StateDictError::Tensor {
        file: path.to_path_buf(),
        tensor: tensor.to_string(),
        message: message.into(),
    }
    .into()
}
