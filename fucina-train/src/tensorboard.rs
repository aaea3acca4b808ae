//! TensorBoard event files, written by hand: the format is small and
//! stable, and the Rust crates for it are unmaintained.
//!
//! A file is a sequence of records, each `len: u64 LE`, `masked_crc(len):
//! u32 LE`, `data`, `masked_crc(data): u32 LE`, where `masked_crc(x) =
//! rotr(crc32c(x), 15) + 0xa282ead8` (TFRecord framing). `data` is a
//! serialized `tensorflow.Event` protobuf: `wall_time` (field 1, double),
//! `step` (field 2, int64), then either `file_version` (field 3, string;
//! the first record, `"brain.Event:2"`) or `summary` (field 5: a
//! `Summary`, repeated `value` (field 1) of `Summary.Value { tag (field
//! 1, string), simple_value (field 2, float) | histo (field 5,
//! HistogramProto) }`). `HistogramProto` is `min` (1), `max` (2), `num`
//! (3), `sum` (4), `sum_squares` (5), all doubles, then the packed
//! repeated doubles `bucket_limit` (6; bucket `i` holds the values above
//! limit `i - 1` up to limit `i`) and `bucket` (7, the counts).

/// The masked CRC-32C of TFRecord framing.
fn masked_crc(data: &[u8]) -> u32 {
    let c = crc32c::crc32c(data);
    c.rotate_right(15).wrapping_add(0xa282_ead8)
}

/// A record framing `data`.
pub(crate) fn record(data: &[u8]) -> Vec<u8> {
    let len = (data.len() as u64).to_le_bytes();
    let mut out = Vec::with_capacity(data.len() + 16);
    out.extend_from_slice(&len);
    out.extend_from_slice(&masked_crc(&len).to_le_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(&masked_crc(data).to_le_bytes());
    out
}

fn varint(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A length-delimited field.
fn bytes_field(field: u32, data: &[u8], out: &mut Vec<u8>) {
    varint(((field << 3) | 2) as u64, out);
    varint(data.len() as u64, out);
    out.extend_from_slice(data);
}

fn event_head(wall_time: f64, step: i64) -> Vec<u8> {
    let mut e = Vec::new();
    e.push(0x09); // field 1, fixed64
    e.extend_from_slice(&wall_time.to_le_bytes());
    e.push(0x10); // field 2, varint
    varint(step as u64, &mut e);
    e
}

/// The first event of a file.
pub(crate) fn file_version_event(wall_time: f64) -> Vec<u8> {
    let mut e = event_head(wall_time, 0);
    bytes_field(3, b"brain.Event:2", &mut e);
    e
}

/// An event with one scalar.
pub(crate) fn scalar_event(wall_time: f64, step: i64, tag: &str, value: f32) -> Vec<u8> {
    let mut v = Vec::new();
    bytes_field(1, tag.as_bytes(), &mut v);
    v.push(0x15); // field 2, fixed32
    v.extend_from_slice(&value.to_le_bytes());
    let mut summary = Vec::new();
    bytes_field(1, &v, &mut summary);
    let mut e = event_head(wall_time, step);
    bytes_field(5, &summary, &mut e);
    e
}

fn double_field(field: u32, v: f64, out: &mut Vec<u8>) {
    varint(((field << 3) | 1) as u64, out);
    out.extend_from_slice(&v.to_le_bytes());
}

fn packed_doubles(field: u32, vs: &[f64], out: &mut Vec<u8>) {
    let bytes: Vec<u8> = vs.iter().flat_map(|v| v.to_le_bytes()).collect();
    bytes_field(field, &bytes, out);
}

/// A histogram's summary: the statistics of the values and the counts of
/// its buckets, each bucket up to and including its right edge.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Histogram {
    pub min: f64,
    pub max: f64,
    pub num: f64,
    pub sum: f64,
    pub sum_squares: f64,
    pub bucket_limit: Vec<f64>,
    pub bucket: Vec<f64>,
}

impl Histogram {
    /// `bins` equal-width buckets over `[min, max]` of finite `values`
    /// (one bucket when they are all equal); sums in f64, in order, so the
    /// same values give the same bits. `None` for no values.
    pub fn of(values: &[f64], bins: usize) -> Option<Histogram> {
        let (&first, _) = values.split_first()?;
        let (mut min, mut max) = (first, first);
        let (mut sum, mut sum_squares) = (0.0, 0.0);
        for &v in values {
            min = min.min(v);
            max = max.max(v);
            sum += v;
            sum_squares += v * v;
        }
        let bins = if max > min { bins.max(1) } else { 1 };
        let width = (max - min) / bins as f64;
        let mut bucket = vec![0.0; bins];
        for &v in values {
            // ceil((v - min) / width) - 1: the bucket whose right edge is
            // the first at or above v (min itself in bucket 0).
            let i = if width > 0.0 {
                (((v - min) / width).ceil() as usize).saturating_sub(1)
            } else {
                0
            };
            bucket[i.min(bins - 1)] += 1.0;
        }
        let mut bucket_limit: Vec<f64> = (1..=bins).map(|i| min + width * i as f64).collect();
        bucket_limit[bins - 1] = max;
        Some(Histogram {
            min,
            max,
            num: values.len() as f64,
            sum,
            sum_squares,
            bucket_limit,
            bucket,
        })
    }
}

/// An event with one histogram.
pub(crate) fn histogram_event(wall_time: f64, step: i64, tag: &str, h: &Histogram) -> Vec<u8> {
    let mut p = Vec::new();
    double_field(1, h.min, &mut p);
    double_field(2, h.max, &mut p);
    double_field(3, h.num, &mut p);
    double_field(4, h.sum, &mut p);
    double_field(5, h.sum_squares, &mut p);
    packed_doubles(6, &h.bucket_limit, &mut p);
    packed_doubles(7, &h.bucket, &mut p);
    let mut v = Vec::new();
    bytes_field(1, tag.as_bytes(), &mut v);
    bytes_field(5, &p, &mut v);
    let mut summary = Vec::new();
    bytes_field(1, &v, &mut summary);
    let mut e = event_head(wall_time, step);
    bytes_field(5, &summary, &mut e);
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_and_the_masked_crc_of_known_values() {
        let mut v = Vec::new();
        varint(300, &mut v);
        assert_eq!(v, [0xac, 0x02]);
        // crc32c("123456789") = 0xe3069283 (the CRC-32C check value).
        assert_eq!(crc32c::crc32c(b"123456789"), 0xe306_9283);
        assert_eq!(
            masked_crc(b"123456789"),
            0xe306_9283u32.rotate_right(15).wrapping_add(0xa282_ead8)
        );
    }

    #[test]
    fn histogram_buckets_hold_values_up_to_their_right_edge() {
        let h = Histogram::of(&[0.0, 1.0, 2.0, 2.5, 4.0], 4).unwrap();
        assert_eq!(h.bucket_limit, [1.0, 2.0, 3.0, 4.0]);
        assert_eq!(h.bucket, [2.0, 1.0, 1.0, 1.0]);
        assert_eq!((h.min, h.max, h.num), (0.0, 4.0, 5.0));
        assert_eq!((h.sum, h.sum_squares), (9.5, 27.25));
        let one = Histogram::of(&[3.0, 3.0], 30).unwrap();
        assert_eq!((one.bucket_limit, one.bucket), (vec![3.0], vec![2.0]));
        assert!(Histogram::of(&[], 30).is_none());
    }
}
