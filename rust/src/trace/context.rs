//! W3C Trace Context: a client's `traceparent` read as the OpenTelemetry SDK's propagator
//! reads it, ours written for an upstream request, and the span ids a record makes.

/// Lowercase hex digits only (the propagator's `[0-9a-f]`), as a number.
fn lower_hex(digits: &[u8]) -> Option<u128> {
    let mut v: u128 = 0;
    for &d in digits {
        let n = match d {
            b'0'..=b'9' => d - b'0',
            b'a'..=b'f' => d - b'a' + 10,
            _ => return None,
        };
        v = (v << 4) | u128::from(n);
    }
    Some(v)
}

/// A `traceparent` value by the SDK's W3C propagator: its pattern
/// `^[ \t]*(hex2)-(hex32)-(hex16)-(hex2)(?:(-.*)|[ \t]*)$` (Python's `$`, which also matches
/// before a final newline; `.` any character but a newline) on at most 512 bytes, then
/// its rules: version ff is invalid, version 00 has nothing after the flags, neither id is
/// zero. (trace id, span id, sampled flag).
pub fn parse_traceparent(value: &[u8]) -> Option<(u128, u64, bool)> {
    if value.is_empty() || value.len() > 512 {
        return None;
    }
    let start = value
        .iter()
        .position(|&b| b != b' ' && b != b'\t')
        .unwrap_or(value.len());
    let s = &value[start..];
    if s.len() < 55 || s[2] != b'-' || s[35] != b'-' || s[52] != b'-' {
        return None;
    }
    let version = lower_hex(&s[..2])?;
    let trace_id = lower_hex(&s[3..35])?;
    let span_id = lower_hex(&s[36..52])? as u64;
    let flags = lower_hex(&s[53..55])?;
    let rest = &s[55..];
    let line = rest.strip_suffix(b"\n").unwrap_or(rest);
    let more = if rest.first() == Some(&b'-') {
        if line.contains(&b'\n') {
            return None;
        }
        true
    } else {
        if !line.iter().all(|&b| b == b' ' || b == b'\t') {
            return None;
        }
        false
    };
    if version == 0xff || (version == 0 && more) || trace_id == 0 || span_id == 0 {
        return None;
    }
    Some((trace_id, span_id, flags & 1 == 1))
}

/// The `traceparent` naming span `span_id` of trace `trace_id` as a sampled parent:
/// `00-{trace id}-{span id}-01`.
pub fn traceparent(trace_id: u128, span_id: u64) -> [u8; 55] {
    let mut value = [0u8; 55];
    value[..3].copy_from_slice(b"00-");
    put_hex(trace_id, &mut value[3..35]);
    value[35] = b'-';
    put_hex(u128::from(span_id), &mut value[36..52]);
    value[52..].copy_from_slice(b"-01");
    value
}

/// A trace id as 32 lowercase hex digits (the metrics' exemplars, the access line).
pub fn trace_id_hex(trace_id: u128) -> [u8; 32] {
    let mut hex = [0u8; 32];
    put_hex(trace_id, &mut hex);
    hex
}

/// The low `out.len()` hex digits of `v`, lowercase, zero-padded (what `{:032x}` writes,
/// without the formatting machinery: two of these a traced request).
fn put_hex(mut v: u128, out: &mut [u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for b in out.iter_mut().rev() {
        *b = DIGITS[(v & 0xf) as usize];
        v >>= 4;
    }
}

/// splitmix64's finalizer over the seed's sequence: never 0 (an invalid span id).
pub fn mixed_id(seed: u64, k: u64) -> u64 {
    let mut z = seed.wrapping_add(k.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    if z == 0 {
        1
    } else {
        z
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
    const SPAN: &str = "00f067aa0ba902b7";
    const TRACE_ID: u128 = 0x4bf92f3577b34da6a3ce929d0e0e4736;
    const SPAN_ID: u64 = 0x00f067aa0ba902b7;

    /// What a `traceparent` reads as: (trace id, span id, sampled).
    type Read = Option<(u128, u64, bool)>;

    /// W3C Trace Context's `traceparent`, as the SDK's propagator reads it (the same cases
    /// as tests/test_traceparent.py holds against the SDK itself): (value, what it reads as).
    fn traceparent_cases() -> Vec<(String, Read)> {
        let ok = |sampled| Some((TRACE_ID, SPAN_ID, sampled));
        vec![
            (format!("00-{TRACE}-{SPAN}-01"), ok(true)),
            (format!("00-{TRACE}-{SPAN}-00"), ok(false)),
            // Only the sampled bit counts; other flags are not ours to read.
            (format!("00-{TRACE}-{SPAN}-03"), ok(true)),
            (format!("00-{TRACE}-{SPAN}-02"), ok(false)),
            // A later version may carry more fields; version 00 may not.
            (format!("01-{TRACE}-{SPAN}-01-future"), ok(true)),
            (format!("00-{TRACE}-{SPAN}-01-future"), None),
            (format!("cc-{TRACE}-{SPAN}-01"), ok(true)),
            // Version ff is invalid; so are an all-zero trace id or parent id.
            (format!("ff-{TRACE}-{SPAN}-01"), None),
            (format!("00-{}-{SPAN}-01", "0".repeat(32)), None),
            (format!("00-{TRACE}-{}-01", "0".repeat(16)), None),
            // Lowercase hex only, each field its exact length.
            (format!("00-{}-{SPAN}-01", TRACE.to_uppercase()), None),
            (format!("0A-{TRACE}-{SPAN}-01"), None),
            (format!("00-{TRACE}-{SPAN}-0g"), None),
            (format!("00-{}-{SPAN}-01", &TRACE[1..]), None),
            (format!("00-{TRACE}0-{SPAN}-01"), None),
            (format!("00-{TRACE}-{SPAN}-1"), None),
            (format!("00-{TRACE}-{SPAN}"), None),
            (format!("00_{TRACE}-{SPAN}-01"), None),
            // Optional whitespace around it (OWS), and Python's `$` before a final newline.
            (format!(" \t00-{TRACE}-{SPAN}-01 \t"), ok(true)),
            (format!("00-{TRACE}-{SPAN}-01\n"), ok(true)),
            (format!("00-{TRACE}-{SPAN}-01 \t\n"), ok(true)),
            (format!("00-{TRACE}-{SPAN}-01\n\n"), None),
            (format!("00-{TRACE}-{SPAN}-01 x"), None),
            (format!("01-{TRACE}-{SPAN}-01-x\n"), ok(true)),
            (format!("01-{TRACE}-{SPAN}-01-a\nb"), None),
            // At most 512 bytes.
            (
                format!("02-{TRACE}-{SPAN}-01-{}", "y".repeat(456)),
                ok(true),
            ),
            (format!("02-{TRACE}-{SPAN}-01-{}", "y".repeat(457)), None),
            (format!("00-{TRACE}-{SPAN}-01{}", "x".repeat(600)), None),
            (String::new(), None),
            ("garbage".into(), None),
            (" ".repeat(60), None),
        ]
    }

    #[test]
    fn traceparent_reads_as_the_w3c_propagator_reads_it() {
        for (value, expected) in traceparent_cases() {
            assert_eq!(parse_traceparent(value.as_bytes()), expected, "{value:?}");
        }
        // Bytes past ASCII after a later version's fields (latin-1 in the SDK's carrier).
        let mut value = format!("01-{TRACE}-{SPAN}-01-").into_bytes();
        value.extend_from_slice(b"\x80\xff");
        assert_eq!(parse_traceparent(&value), Some((TRACE_ID, SPAN_ID, true)));
    }

    #[test]
    fn a_written_traceparent_reads_back() {
        let value = traceparent(TRACE_ID, SPAN_ID);
        assert_eq!(value, *format!("00-{TRACE}-{SPAN}-01").as_bytes());
        assert_eq!(parse_traceparent(&value), Some((TRACE_ID, SPAN_ID, true)));
        // Leading zeros are written.
        let value = traceparent(1, 2);
        assert_eq!(
            &value[..],
            b"00-00000000000000000000000000000001-0000000000000002-01"
        );
        assert_eq!(&trace_id_hex(TRACE_ID)[..], TRACE.as_bytes());
        assert_eq!(&trace_id_hex(u128::MAX)[..], "f".repeat(32).as_bytes());
    }

    #[test]
    fn span_ids_are_never_zero_and_distinct_in_a_record() {
        for seed in [0, 1, u64::MAX, 0x9E37_79B9_7F4A_7C15u64.wrapping_neg()] {
            let ids: Vec<u64> = (0..1000).map(|k| mixed_id(seed, k)).collect();
            assert!(ids.iter().all(|&id| id != 0), "seed {seed}");
            let mut sorted = ids.clone();
            sorted.sort_unstable();
            sorted.dedup();
            assert_eq!(sorted.len(), ids.len(), "seed {seed}");
        }
        // A seed's sequence is its own: another seed gives other ids.
        assert_ne!(mixed_id(1, 0), mixed_id(2, 0));
    }
}
