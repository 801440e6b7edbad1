//! What the targets share: how one fuzz input names the points a stream is cut at.

/// Most cut points one input names.
pub const MAX_CUTS: usize = 15;

/// Split a fuzz input into a stream and the pieces it is fed in. Layout: one byte `k`
/// (`k % 16` cuts), then `k` little-endian u16 offsets (each taken modulo the stream's
/// length + 1), then the stream. An input too short for its cuts is all stream, uncut.
pub fn cuts(data: &[u8]) -> (Vec<&[u8]>, &[u8]) {
    let Some((&k, rest)) = data.split_first() else {
        return (vec![data], data);
    };
    let k = usize::from(k) % (MAX_CUTS + 1);
    if rest.len() < 2 * k {
        return (vec![data], data);
    }
    let (offsets, stream) = rest.split_at(2 * k);
    let mut at: Vec<usize> = offsets
        .chunks_exact(2)
        .map(|b| usize::from(u16::from_le_bytes([b[0], b[1]])) % (stream.len() + 1))
        .collect();
    at.sort_unstable();
    let mut pieces = Vec::with_capacity(k + 1);
    let mut prev = 0;
    for cut in at.into_iter().chain([stream.len()]) {
        pieces.push(&stream[prev..cut]);
        prev = cut;
    }
    (pieces, stream)
}

/// The inverse of [`cuts`], for writing seed inputs: `stream` cut at `at`.
pub fn with_cuts(stream: &[u8], at: &[u16]) -> Vec<u8> {
    assert!(at.len() <= MAX_CUTS);
    let mut out = vec![at.len() as u8];
    for a in at {
        out.extend_from_slice(&a.to_le_bytes());
    }
    out.extend_from_slice(stream);
    out
}
