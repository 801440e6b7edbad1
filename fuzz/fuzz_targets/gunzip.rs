//! gunzip_capped: the first two bytes are the cap (little-endian u16), the rest the gzip
//! data. Never a panic, never more than the cap, and the cap only decides whether the
//! same bytes come out.
#![no_main]

use edgegw_core::error::Rejection;
use edgegw_core::otlp::gunzip_capped;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (cap, gz) = match data {
        [a, b, rest @ ..] => (usize::from(u16::from_le_bytes([*a, *b])), rest),
        _ => (0, data),
    };
    let capped = gunzip_capped(gz, cap);
    let uncapped = gunzip_capped(gz, 1 << 24);
    match (&capped, &uncapped) {
        (Ok(out), Ok(all)) => assert!(out.len() <= cap && out == all),
        (Err(Rejection::PayloadTooLarge { limit }), Ok(all)) => {
            assert!(*limit == cap && all.len() > cap)
        }
        (Err(Rejection::InvalidGzip), Err(Rejection::InvalidGzip)) => {}
        // Past the cap before the fault: the capped call stops first.
        (Err(Rejection::PayloadTooLarge { .. }), Err(Rejection::InvalidGzip)) => {}
        _ => panic!("cap {cap}: {capped:?} vs {uncapped:?}"),
    }
});
