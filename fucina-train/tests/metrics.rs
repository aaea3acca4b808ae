//! The metrics logger's files: JSONL lines, and TensorBoard event records
//! that TensorBoard's own reader reads. `tools/check_tensorboard_events.py`
//! read the committed event file (`tests/fixtures/run.tfevents`, written
//! by `write_fixture` below) with
//! `tensorboard.backend.event_processing.event_accumulator` and wrote every
//! scalar and histogram it saw to `tests/goldens/tensorboard.json`; this
//! test checks that a fresh run writes the same records as the fixture
//! (wall times aside), with valid framing checksums, and that they decode
//! to the golden: every scalar, and every histogram's step, min, max, num,
//! sum, sum of squares, bucket limits and counts.

use std::path::{Path, PathBuf};

use fucina_autograd::testing::TestCtx;
use fucina_autograd::Tensor;
use fucina_train::MetricsLogger;

/// The run: three tags at their steps.
fn script() -> Vec<(&'static str, u64, f64)> {
    let mut v = Vec::new();
    for s in 1..=20u64 {
        v.push(("train/loss", s, 3.0 / (1.0 + 0.1 * s as f64)));
        v.push(("lr", s, 1e-3 * s as f64 / 20.0));
        if s % 5 == 0 {
            v.push(("val/loss", s, 3.2 / (1.0 + 0.08 * s as f64)));
        }
    }
    v
}

/// The parameters whose histograms the run logs: `w` `[3, 4]` with the
/// gradient of `sum((w·x)²)`, and `b` `[4]`, which has no gradient.
fn params(ctx: &TestCtx, step: u64) -> Vec<(String, Tensor)> {
    let s = step as f64;
    let w: Vec<f64> = (0..12).map(|i| (i as f64 - 5.5) * 0.1 * s).collect();
    let w = Tensor::variable(ctx, &w, &[3, 4]).unwrap();
    let x = Tensor::constant(ctx, &[1.0, -2.0, 0.5], &[1, 3]).unwrap();
    let y = x.matmul(&w).unwrap();
    y.mul(&y).unwrap().sum_all().unwrap().backward().unwrap();
    let b = Tensor::constant(ctx, &[0.25, 0.25, 0.25, 0.25], &[4]).unwrap();
    vec![("w".into(), w), ("b".into(), b)]
}

/// The steps whose parameter histograms are logged (every 10th).
const HIST_EVERY: u64 = 10;

fn write_run(dir: &Path) -> PathBuf {
    let ctx = TestCtx::with_threads(1).unwrap();
    let mut log = MetricsLogger::create(dir)
        .unwrap()
        .histograms_every(HIST_EVERY)
        .histogram_bins(5)
        .unwrap();
    for (tag, step, value) in script() {
        log.scalar(tag, step, value).unwrap();
        if tag == "lr" {
            let logged = log.parameter_histograms(step, &params(&ctx, step)).unwrap();
            assert_eq!(logged, step % HIST_EVERY == 0);
        }
    }
    // Values of any source, and one bucket when they are all equal.
    log.histogram("const", 3, &[7.0; 4]).unwrap();
    log.flush().unwrap();
    log.event_file().to_path_buf()
}

/// `(tag, step, [min, max, num, sum, sum_squares], limits, counts)` of a
/// histogram event.
type Hist = (String, i64, Vec<f64>, Vec<f64>, Vec<f64>);

/// A protobuf field: `(number, wire type, payload)`.
type Field = (u64, u64, Vec<u8>);

fn doubles(b: &[u8]) -> Vec<f64> {
    b.chunks(8)
        .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// `(tag, step, fields)` of the summary value an event carries (`None` for
/// an event without one, such as the file version).
fn summary_value(event: &[u8]) -> Option<(String, i64, Vec<Field>)> {
    let fs = fields(event);
    let step = fs
        .iter()
        .find(|f| f.0 == 2)
        .map(|f| i64::from_le_bytes(f.2[..8].try_into().unwrap()))?;
    let summary = &fs.iter().find(|f| f.0 == 5)?.2;
    let value = &fields(summary).into_iter().find(|f| f.0 == 1)?.2;
    let vf = fields(value);
    let tag = String::from_utf8(vf.iter().find(|f| f.0 == 1)?.2.clone()).unwrap();
    Some((tag, step, vf))
}

fn histogram(event: &[u8]) -> Option<Hist> {
    let (tag, step, vf) = summary_value(event)?;
    let h = fields(&vf.iter().find(|f| f.0 == 5)?.2);
    let get = |n: u64| h.iter().find(|f| f.0 == n).map(|f| doubles(&f.2)).unwrap();
    let stats = (1..=5).map(|n| get(n)[0]).collect();
    Some((tag, step, stats, get(6), get(7)))
}

fn masked_crc(d: &[u8]) -> u32 {
    crc32c::crc32c(d).rotate_right(15).wrapping_add(0xa282_ead8)
}

/// Every record's data, checking both checksums.
fn records(bytes: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let len_b = &bytes[i..i + 8];
        let len = u64::from_le_bytes(len_b.try_into().unwrap()) as usize;
        let crc = u32::from_le_bytes(bytes[i + 8..i + 12].try_into().unwrap());
        assert_eq!(crc, masked_crc(len_b), "length checksum at {i}");
        let data = &bytes[i + 12..i + 12 + len];
        let dcrc = u32::from_le_bytes(bytes[i + 12 + len..i + 16 + len].try_into().unwrap());
        assert_eq!(dcrc, masked_crc(data), "data checksum at {i}");
        out.push(data.to_vec());
        i += 16 + len;
    }
    out
}

fn varint(b: &[u8], i: &mut usize) -> u64 {
    let (mut v, mut shift) = (0u64, 0);
    loop {
        let x = b[*i];
        *i += 1;
        v |= ((x & 0x7f) as u64) << shift;
        if x < 0x80 {
            return v;
        }
        shift += 7;
    }
}

/// `(field, wire type, payload)` of each protobuf field.
fn fields(b: &[u8]) -> Vec<Field> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let key = varint(b, &mut i);
        let (f, w) = (key >> 3, key & 7);
        let payload = match w {
            0 => {
                let v = varint(b, &mut i);
                v.to_le_bytes().to_vec()
            }
            1 => {
                i += 8;
                b[i - 8..i].to_vec()
            }
            2 => {
                let n = varint(b, &mut i) as usize;
                i += n;
                b[i - n..i].to_vec()
            }
            5 => {
                i += 4;
                b[i - 4..i].to_vec()
            }
            _ => panic!("wire type {w}"),
        };
        out.push((f, w, payload));
    }
    out
}

/// The event without its wall time (field 1).
fn without_wall_time(event: &[u8]) -> Vec<Field> {
    fields(event)
        .into_iter()
        .filter(|(f, _, _)| *f != 1)
        .collect()
}

/// `(tag, step, value)` of a scalar event.
fn scalar(event: &[u8]) -> Option<(String, i64, f32)> {
    let (tag, step, vf) = summary_value(event)?;
    let v = f32::from_le_bytes(vf.iter().find(|f| f.0 == 2)?.2[..4].try_into().unwrap());
    Some((tag, step, v))
}

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/run.tfevents")
}

#[test]
#[ignore = "writes tests/fixtures/run.tfevents for tools/check_tensorboard_events.py"]
fn write_fixture() {
    let dir = std::env::temp_dir().join(format!("fucina-train-tb-fixture-{}", std::process::id()));
    let f = write_run(&dir);
    std::fs::copy(f, fixture()).unwrap();
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn event_files_match_the_fixture_tensorboard_read() {
    let dir = std::env::temp_dir().join(format!("fucina-train-tb-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let fresh = records(&std::fs::read(write_run(&dir)).unwrap());
    let committed = records(&std::fs::read(fixture()).unwrap());
    assert_eq!(fresh.len(), committed.len());
    for (a, b) in fresh.iter().zip(&committed) {
        assert_eq!(without_wall_time(a), without_wall_time(b));
    }
    // The first record names the file version.
    assert!(fields(&fresh[0])
        .iter()
        .any(|f| f.0 == 3 && f.2 == b"brain.Event:2"));
    // What TensorBoard's reader saw in the fixture.
    let golden: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/goldens/tensorboard.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let ours: Vec<(String, i64, f32)> = fresh[1..].iter().filter_map(|e| scalar(e)).collect();
    let mut n = 0;
    for (tag, rows) in golden["scalars"].as_object().unwrap() {
        for r in rows.as_array().unwrap() {
            let (step, value) = (r[0].as_i64().unwrap(), r[1].as_f64().unwrap() as f32);
            assert!(
                ours.contains(&(tag.clone(), step, value)),
                "{tag} {step} {value}"
            );
            n += 1;
        }
    }
    assert_eq!(n, script().len(), "TensorBoard read every scalar");
    assert_eq!(ours.len(), script().len());
    // Histograms: weights/w and grads/w at steps 10 and 20, weights/b
    // (no gradient: no grads/b) and `const`.
    let hists: Vec<Hist> = fresh[1..].iter().filter_map(|e| histogram(e)).collect();
    assert_eq!(hists.len(), 2 * 3 + 1);
    assert!(!hists.iter().any(|h| h.0 == "grads/b"));
    let mut n = 0;
    for (tag, rows) in golden["histograms"].as_object().unwrap() {
        for r in rows.as_array().unwrap() {
            let f = |k: &str| r[k].as_f64().unwrap();
            let list = |k: &str| -> Vec<f64> {
                r[k].as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_f64().unwrap())
                    .collect()
            };
            let want: Hist = (
                tag.clone(),
                r["step"].as_i64().unwrap(),
                vec![f("min"), f("max"), f("num"), f("sum"), f("sum_squares")],
                list("bucket_limit"),
                list("bucket"),
            );
            assert!(hists.contains(&want), "{want:?} not in {hists:?}");
            n += 1;
        }
    }
    assert_eq!(n, hists.len(), "TensorBoard read every histogram");
    // The gradient of sum((x·w)²) is xᵀ·2(x·w): checked against the logged one.
    let ctx = TestCtx::with_threads(1).unwrap();
    let p = params(&ctx, 10);
    let g = p[0].1.grad().unwrap().to_vec_f64().unwrap();
    let logged = hists
        .iter()
        .find(|h| h.0 == "grads/w" && h.1 == 10)
        .unwrap();
    let min = g.iter().copied().fold(f64::INFINITY, f64::min);
    let max = g.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    assert_eq!(logged.2[..3], [min, max, 12.0]);
    assert_eq!(logged.4.iter().sum::<f64>(), 12.0);
    drop(p);
    // JSONL: one line per scalar with the exact f64.
    let text = std::fs::read_to_string(dir.join("metrics.jsonl")).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for (l, (tag, step, value)) in lines.iter().zip(script()) {
        assert_eq!(l["tag"], tag);
        assert_eq!(l["step"], step);
        assert_eq!(l["value"].as_f64().unwrap(), value);
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn non_finite_values_are_logged_not_lost() {
    let dir = std::env::temp_dir().join(format!("fucina-train-tb-nan-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let events = {
        let mut log = MetricsLogger::create(&dir).unwrap();
        log.scalar("loss", 1, f64::NAN).unwrap();
        log.scalar("loss", 2, f64::INFINITY).unwrap();
        log.scalar("loss", 3, f64::NEG_INFINITY).unwrap();
        assert!(log.scalar("loss", u64::MAX, 1.0).is_err());
        log.flush().unwrap();
        log.event_file().to_path_buf()
    };
    let text = std::fs::read_to_string(dir.join("metrics.jsonl")).unwrap();
    let values: Vec<String> = text
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["value"].to_string())
        .collect();
    assert_eq!(values, ["\"NaN\"", "\"Infinity\"", "\"-Infinity\""]);
    // A histogram takes finite values only, and at least one; bins >= 1.
    {
        let mut log = MetricsLogger::create(&dir).unwrap();
        let e = log.histogram("h", 1, &[1.0, f64::NAN]).unwrap_err();
        assert!(
            e.to_string().contains("`h`") && e.to_string().contains("value 1"),
            "{e}"
        );
        assert!(log.histogram("h", 1, &[]).is_err());
        assert!(log.histogram("h", u64::MAX, &[1.0]).is_err());
        assert!(log.histogram_bins(0).is_err());
    }
    let recs = records(&std::fs::read(events).unwrap());
    let v: Vec<f32> = recs[1..].iter().map(|e| scalar(e).unwrap().2).collect();
    assert!(v[0].is_nan() && v[1] == f32::INFINITY && v[2] == f32::NEG_INFINITY);
    std::fs::remove_dir_all(&dir).ok();
}
