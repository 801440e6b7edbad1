//! OTLP protobuf metrics: decoded or rejected, never a panic, within the bounds.
#![no_main]

use edgegw_core::otlp::{decode_metrics, MAX_DATA_POINTS};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(resources) = decode_metrics(data) else {
        return;
    };
    let points: usize = resources
        .iter()
        .flat_map(|r| &r.metrics)
        .map(|m| m.points.len())
        .sum();
    assert!(points <= MAX_DATA_POINTS);
});
