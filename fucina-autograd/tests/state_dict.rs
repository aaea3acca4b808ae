//! State dicts (fucina-autograd/src/io): save then load is bit-exact; each
//! bad file (truncated, wrong dtype or shape, missing key, unexpected key,
//! not safetensors) is one structured error naming the file and the key, and
//! the model's bits are unchanged afterwards; non-strict loads report the
//! same lists; f16/bf16 widen into f32/f64; prefix rules rewrite keys.

mod common;

use std::path::{Path, PathBuf};

use fucina_autograd::io::{
    load_state_dict, load_state_dict_bytes, save_state_dict, state_dict_bytes, DtypePolicy,
    KeyMismatch, LoadOptions, SafetensorsFile, SaveOptions, StateDictError,
};
use fucina_autograd::testing::TestCtx;
use fucina_autograd::{Error, Tensor};
use fucina_core::{DType, ExecContext};

fn tmp(tag: &str) -> TmpPath {
    TmpPath(std::env::temp_dir().join(format!(
        "fucina-sd-{tag}-{}.safetensors",
        std::process::id()
    )))
}

/// A temporary file's path ([`tmp`]); the file, if any, is removed when the
/// path drops (the end of each test, or its unwinding).
struct TmpPath(PathBuf);

impl std::ops::Deref for TmpPath {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for TmpPath {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for TmpPath {
    fn drop(&mut self) {
        std::fs::remove_file(&self.0).ok();
    }
}

/// Values with awkward bits: signed zero, subnormals, large and tiny magnitudes.
fn awkward(n: usize, seed: u64) -> Vec<f64> {
    (0..n)
        .map(|i| {
            let x = ((i as u64 + 1 + seed * 977).wrapping_mul(0x9E37_79B9_7F4A_7C15)) as f64
                / u64::MAX as f64;
            match i % 5 {
                0 => -0.0,
                1 => 1e-310 * x,
                2 => (x - 0.5) * 1e30,
                _ => x - 0.5,
            }
        })
        .collect()
}

fn model(ctx: &ExecContext, seed: u64) -> Vec<(String, Tensor)> {
    let a: Vec<f32> = awkward(12, seed).iter().map(|&v| v as f32).collect();
    let b = awkward(5, seed + 1);
    let c: Vec<f32> = awkward(6, seed + 2).iter().map(|&v| v as f32).collect();
    vec![
        (
            "enc.w".to_string(),
            Tensor::variable(ctx, &a, &[3, 4]).unwrap(),
        ),
        (
            "enc.b".to_string(),
            Tensor::variable(ctx, &b, &[5]).unwrap(),
        ),
        (
            "head.w".to_string(),
            Tensor::variable(ctx, &c, &[2, 3]).unwrap(),
        ),
    ]
}

/// Every tensor's bits, widened to u64.
fn bits(ps: &[(String, Tensor)]) -> Vec<(String, Vec<u64>)> {
    ps.iter()
        .map(|(n, t)| (n.clone(), common::bits(t)))
        .collect()
}

fn state_err(e: Error) -> StateDictError {
    match e {
        Error::StateDict(e) => *e,
        other => panic!("not a state-dict error: {other}"),
    }
}

/// Loads `path` strictly into a fresh model, expects an error, checks the
/// model is unchanged and returns the error.
fn failing_load(ctx: &ExecContext, path: &Path, opts: &LoadOptions) -> StateDictError {
    let target = model(ctx, 99);
    let before = bits(&target);
    let err = load_state_dict(path, &target, opts).unwrap_err();
    assert_eq!(bits(&target), before, "a failed load changed the model");
    let msg = err.to_string();
    assert!(
        msg.contains(&path.display().to_string()),
        "no file in `{msg}`"
    );
    state_err(err)
}

/// The model of seed 1 as `edit` leaves it, saved to `tmp(tag)`: the path
/// and the model.
fn save_edited(
    ctx: &ExecContext,
    tag: &str,
    edit: impl FnOnce(&mut Vec<(String, Tensor)>),
) -> (TmpPath, Vec<(String, Tensor)>) {
    let path = tmp(tag);
    let mut src = model(ctx, 1);
    edit(&mut src);
    save_state_dict(&path, &src, &SaveOptions::default()).unwrap();
    (path, src)
}

/// Writes `bytes` to `path`: a strict load of it must fail with
/// [`StateDictError::Format`] ([`failing_load`]).
fn assert_format_error(ctx: &ExecContext, path: &Path, bytes: &[u8]) {
    std::fs::write(path, bytes).unwrap();
    assert!(matches!(
        failing_load(ctx, path, &LoadOptions::new()),
        StateDictError::Format { .. }
    ));
}

/// [`failing_load`] where the error must be [`StateDictError::Keys`]: its
/// file and its missing, unexpected and mismatched lists (any other error
/// fails the test).
fn failing_keys(
    ctx: &ExecContext,
    path: &Path,
    opts: &LoadOptions,
) -> (PathBuf, Vec<String>, Vec<String>, Vec<KeyMismatch>) {
    match failing_load(ctx, path, opts) {
        StateDictError::Keys {
            file,
            missing,
            unexpected,
            mismatched,
        } => (file, missing, unexpected, mismatched),
        e => panic!("wrong error: {e}"),
    }
}

#[test]
fn save_then_load_is_bit_exact() {
    let ctx = TestCtx::with_threads(1).unwrap();
    let src = model(&ctx, 1);
    let path = tmp("roundtrip");
    save_state_dict(&path, &src, &SaveOptions::default()).unwrap();
    let dst = model(&ctx, 2);
    assert_ne!(bits(&src), bits(&dst));
    let rep = load_state_dict(&path, &dst, &LoadOptions::new()).unwrap();
    assert!(rep.is_complete());
    assert_eq!(rep.loaded, ["enc.w", "enc.b", "head.w"]);
    assert_eq!(bits(&src), bits(&dst));
    // The file is readable by the reference implementation too.
    let bytes = std::fs::read(&path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    assert_eq!(st.tensor("enc.b").unwrap().shape(), &[5]);
    drop((src, dst));
}

#[test]
fn truncated_file_names_file_and_tensor() {
    let ctx = TestCtx::with_threads(1).unwrap();
    let path = tmp("truncated");
    let good = state_dict_bytes(&path, &model(&ctx, 1), &SaveOptions::default()).unwrap();
    // Cut inside the data: the header is intact, the last tensor's bytes run past the end.
    std::fs::write(&path, &good[..good.len() - 3]).unwrap();
    match failing_load(&ctx, &path, &LoadOptions::new()) {
        StateDictError::Tensor {
            file,
            tensor,
            message,
        } => {
            assert_eq!(file, *path);
            assert!(message.contains("truncated"), "{message}");
            // Tensors are laid out sorted by dtype alignment then name; whichever is last is named.
            assert!(
                ["enc.w", "enc.b", "head.w"].contains(&tensor.as_str()),
                "{tensor}"
            );
        }
        e => panic!("wrong error: {e}"),
    }
    // Cut inside the header.
    assert_format_error(&ctx, &path, &good[..20]);
}

#[test]
fn wrong_dtype_names_the_key() {
    let ctx = TestCtx::with_threads(1).unwrap();
    // enc.b stored as i64: no float policy loads it.
    let (path, src) = save_edited(&ctx, "dtype", |src| {
        src[1].1 = Tensor::constant(&ctx, &[1i64, 2, 3, 4, 5], &[5]).unwrap();
    });
    let any_float = LoadOptions::new().dtype_policy(DtypePolicy::AnyFloat);
    let (_, missing, unexpected, mismatched) = failing_keys(&ctx, &path, &any_float);
    assert!(missing.is_empty() && unexpected.is_empty());
    assert_eq!(mismatched.len(), 1);
    assert_eq!(mismatched[0].key, "enc.b");
    assert_eq!(mismatched[0].file_dtype, "I64");
    assert_eq!(mismatched[0].param_dtype, DType::F64);
    // f64 into an f32 parameter narrows: refused by the default policy.
    drop(src);
    let (path, src) = save_edited(&ctx, "dtype", |src| {
        src[0].1 = Tensor::variable(&ctx, &[0.5f64; 12], &[3, 4]).unwrap();
    });
    let e = failing_load(&ctx, &path, &LoadOptions::new());
    assert!(e.to_string().contains("enc.w"), "{e}");
    drop(src);
}

#[test]
fn wrong_shape_names_the_key() {
    let ctx = TestCtx::with_threads(1).unwrap();
    let (path, src) = save_edited(&ctx, "shape", |src| {
        src[2].1 = Tensor::variable(&ctx, &[0.5f32; 6], &[3, 2]).unwrap();
    });
    let (_, _, _, mismatched) = failing_keys(&ctx, &path, &LoadOptions::new());
    assert_eq!(mismatched.len(), 1);
    assert_eq!(mismatched[0].key, "head.w");
    assert_eq!(mismatched[0].file_shape, [3, 2]);
    assert_eq!(mismatched[0].param_shape, [2, 3]);
    drop(src);
}

#[test]
fn missing_key_is_listed() {
    let ctx = TestCtx::with_threads(1).unwrap();
    let (path, src) = save_edited(&ctx, "missing", |src| src.truncate(2));
    let (_, missing, unexpected, mismatched) = failing_keys(&ctx, &path, &LoadOptions::new());
    assert_eq!(missing, ["head.w"]);
    assert!(unexpected.is_empty() && mismatched.is_empty());
    drop(src);
}

#[test]
fn unexpected_key_is_rejected_when_strict_and_reported_when_not() {
    let ctx = TestCtx::with_threads(1).unwrap();
    let (path, src) = save_edited(&ctx, "unexpected", |src| {
        src.push((
            "pooler.dense.bias".into(),
            Tensor::variable(&ctx, &[1f32, 2.0], &[2]).unwrap(),
        ))
    });
    let (file, missing, unexpected, mismatched) = failing_keys(&ctx, &path, &LoadOptions::new());
    assert_eq!(file, *path);
    assert_eq!(unexpected, ["pooler.dense.bias"]);
    assert!(missing.is_empty() && mismatched.is_empty());
    // Non-strict: everything that fits loads; the lists come back.
    let mut dst = model(&ctx, 2);
    dst[2].1 = Tensor::variable(&ctx, &[0f32; 4], &[4]).unwrap(); // mismatched shape
    dst.push((
        "extra".into(),
        Tensor::variable(&ctx, &[7f32], &[1]).unwrap(),
    ));
    let head_before = bits(&dst[2..]);
    let rep = load_state_dict(&path, &dst, &LoadOptions::new().strict(false)).unwrap();
    assert_eq!(rep.loaded, ["enc.w", "enc.b"]);
    assert_eq!(rep.missing, ["extra"]);
    assert_eq!(rep.unexpected, ["pooler.dense.bias"]);
    assert_eq!(rep.mismatched.len(), 1);
    assert_eq!(rep.mismatched[0].key, "head.w");
    assert_eq!(bits(&dst[..2]), bits(&src[..2]));
    assert_eq!(bits(&dst[2..]), head_before);
    drop((src, dst));
}

#[test]
fn non_safetensors_file_is_a_format_error() {
    let ctx = TestCtx::with_threads(1).unwrap();
    let path = tmp("notst");
    std::fs::write(
        &path,
        b"{\"step\": 3, \"this\": \"is json, not safetensors\"}",
    )
    .unwrap();
    match failing_load(&ctx, &path, &LoadOptions::new()) {
        StateDictError::Format { file, message } => {
            assert_eq!(file, *path);
            assert!(message.contains("header length"), "{message}");
        }
        e => panic!("wrong error: {e}"),
    }
    // Too short for even the length prefix, and a header that is not JSON.
    assert_format_error(&ctx, &path, b"abc");
    let mut junk = 4u64.to_le_bytes().to_vec();
    junk.extend_from_slice(b"{abc");
    assert_format_error(&ctx, &path, &junk);
    // A missing file is an I/O error naming it.
    std::fs::remove_file(&path).ok();
    assert!(matches!(
        failing_load(&ctx, &path, &LoadOptions::new()),
        StateDictError::Io { .. }
    ));
}

#[test]
fn half_precision_widens_and_saves_narrow_on_request() {
    let ctx = TestCtx::with_threads(1).unwrap();
    let path = tmp("half");
    let src = model(&ctx, 1);
    for (store, tol) in [(DType::BF16, 1.0 / 128.0), (DType::F16, 1.0 / 1024.0)] {
        let opts = SaveOptions {
            float_dtype: Some(store),
            ..Default::default()
        };
        save_state_dict(&path, &src, &opts).unwrap();
        let f = SafetensorsFile::open(&path).unwrap();
        assert!(f.names().all(|n| f.info(n).unwrap().dtype == Some(store)));
        // Exact refuses; the default policy widens into f32 and f64.
        let dst = model(&ctx, 2);
        let e = load_state_dict(
            &path,
            &dst,
            &LoadOptions::new().dtype_policy(DtypePolicy::Exact),
        );
        assert!(e.is_err());
        load_state_dict(&path, &dst, &LoadOptions::new()).unwrap();
        for ((_, a), (_, b)) in src.iter().zip(&dst) {
            // Stored values are the source rounded to `store`; widening is exact.
            let want = ctx
                .to_dtype(&ctx.to_dtype(&a.raw().unwrap(), store).unwrap(), a.dtype())
                .unwrap();
            let want = fucina_autograd::Tensor::from_raw(&ctx, want, false).unwrap();
            assert_eq!(
                bits(&[("x".into(), want)]),
                bits(&[("x".into(), b.clone())])
            );
            for (x, y) in a.to_vec_f64().unwrap().iter().zip(b.to_vec_f64().unwrap()) {
                assert!(
                    (x - y).abs() <= tol * x.abs().max(6.2e-5) || x.abs() > 6.5e4,
                    "{x} vs {y}"
                );
            }
        }
        drop(dst);
    }
    drop(src);
}

#[test]
fn prefix_rules_rewrite_keys() {
    let ctx = TestCtx::with_threads(1).unwrap();
    let src = model(&ctx, 1);
    let prefixed: Vec<_> = src
        .iter()
        .map(|(n, t)| (format!("bert.{n}"), t.clone()))
        .collect();
    let bytes = state_dict_bytes(Path::new("mem"), &prefixed, &SaveOptions::default()).unwrap();
    let dst = model(&ctx, 2);
    // Without the rule: all three missing and unexpected, nothing loaded.
    let e = state_err(load_state_dict_bytes("mem", &bytes, &dst, &LoadOptions::new()).unwrap_err());
    assert!(
        matches!(&e, StateDictError::Keys { missing, unexpected, .. } if missing.len() == 3 && unexpected.len() == 3)
    );
    load_state_dict_bytes(
        "mem",
        &bytes,
        &dst,
        &LoadOptions::new().map_prefix("bert.", ""),
    )
    .unwrap();
    assert_eq!(bits(&src), bits(&dst));
    // Two file keys mapping to one name is an error naming the second key.
    let mut both = prefixed.clone();
    both.push(src[0].clone());
    let bytes = state_dict_bytes(Path::new("mem"), &both, &SaveOptions::default()).unwrap();
    let e = state_err(
        load_state_dict_bytes(
            "mem",
            &bytes,
            &dst,
            &LoadOptions::new().map_prefix("bert.", ""),
        )
        .unwrap_err(),
    );
    assert!(matches!(e, StateDictError::Tensor { .. }), "{e}");
    drop((src, prefixed, both, dst));
}

/// A tensor of `shape` whose exec scope has closed (its value is released).
fn released(ctx: &ExecContext, shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    let x = Tensor::variable(ctx, &vec![0.5f32; n], shape).unwrap();
    let scope = fucina_autograd::ExecScope::open();
    let y = x.mul_scalar(2.0).unwrap();
    scope.close();
    assert!(y.is_released());
    y
}

#[test]
fn a_released_target_fails_the_load_before_any_target_is_assigned() {
    let ctx = TestCtx::with_threads(1).unwrap();
    let src = model(&ctx, 1);
    let bytes = state_dict_bytes(Path::new("mem"), &src, &SaveOptions::default()).unwrap();
    // The released target is the last one, so the first two would be
    // assigned before it is reached.
    let mut target = model(&ctx, 99);
    target[2].1 = released(&ctx, &[2, 3]);
    let before = bits(&target[..2]);
    let err = load_state_dict_bytes("mem", &bytes, &target, &LoadOptions::new()).unwrap_err();
    assert_eq!(
        bits(&target[..2]),
        before,
        "a failed load changed the model"
    );
    let msg = err.to_string();
    assert!(msg.contains("head.w") && msg.contains("mem"), "{msg}");
    assert!(matches!(state_err(err), StateDictError::Tensor { .. }));
    // Non-strict loads are all or nothing too.
    let err = load_state_dict_bytes("mem", &bytes, &target, &LoadOptions::new().strict(false));
    assert!(err.is_err());
    assert_eq!(bits(&target[..2]), before);
    drop((src, target));
}

/// A safetensors file from a raw header and data (for headers no writer makes).
fn raw_file(header: &str, data_len: usize) -> Vec<u8> {
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header.as_bytes());
    out.extend((0..data_len).map(|i| i as u8));
    out
}

fn open_err(bytes: &[u8]) -> String {
    SafetensorsFile::from_bytes("hand.safetensors", bytes)
        .unwrap_err()
        .to_string()
}

#[test]
fn a_header_naming_a_key_twice_is_an_error_naming_file_and_key() {
    let h = r#"{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"w":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}}"#;
    let msg = open_err(&raw_file(h, 12));
    assert!(
        msg.contains("hand.safetensors") && msg.contains("`w`") && msg.contains("twice"),
        "{msg}"
    );
    // And the loader never assigns from it.
    let ctx = TestCtx::with_threads(1).unwrap();
    let w = Tensor::variable(&ctx, &[7.0f32], &[1]).unwrap();
    let params = [("w".to_string(), w.clone())];
    assert!(load_state_dict_bytes(
        "hand.safetensors",
        &raw_file(h, 12),
        &params,
        &LoadOptions::new()
    )
    .is_err());
    assert_eq!(w.to_vec::<f32>().unwrap(), [7.0]);
    drop((params, w));
}

#[test]
fn overlapping_holed_or_short_data_offsets_are_errors() {
    let entry = |n: &str, b: usize, e: usize| {
        format!(
            r#""{n}":{{"dtype":"F32","shape":[{}],"data_offsets":[{b},{e}]}}"#,
            (e - b) / 4
        )
    };
    let cases = [
        // b reads a's last 4 bytes.
        (
            format!("{{{},{}}}", entry("a", 0, 8), entry("b", 4, 12)),
            12,
            "overlap",
        ),
        // Both on the same bytes.
        (
            format!("{{{},{}}}", entry("a", 0, 8), entry("b", 0, 8)),
            8,
            "overlap",
        ),
        // Bytes 8..12 belong to nobody.
        (
            format!("{{{},{}}}", entry("a", 0, 8), entry("b", 12, 16)),
            16,
            "no tensor",
        ),
        // Data past the last tensor.
        (format!("{{{}}}", entry("a", 0, 8)), 12, "holds 12 bytes"),
    ];
    for (h, len, what) in cases {
        let msg = open_err(&raw_file(&h, len));
        assert!(
            msg.contains("hand.safetensors") && msg.contains(what),
            "{h}: {msg}"
        );
    }
    // Out of order in the JSON but tiling the data is a valid file (the
    // format orders nothing but the bytes), as are zero-sized tensors.
    let ok = format!(
        "{{{},{},{}}}",
        entry("b", 8, 12),
        entry("e", 8, 8),
        entry("a", 0, 8)
    );
    let bytes = raw_file(&ok, 12);
    let f = SafetensorsFile::from_bytes("hand.safetensors", &bytes).unwrap();
    assert_eq!(f.names().collect::<Vec<_>>(), ["a", "b", "e"]);
}
