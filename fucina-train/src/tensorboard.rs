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
//! 1, string), simple_value (field 2, float) }`).

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
}
