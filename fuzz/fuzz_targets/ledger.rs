//! The tenants' ledger (rust/src/limits.rs) under any sequence of admissions and settlements:
//! never a panic; a refusal charges nothing; a holder's requests at once are the admitted
//! requests not yet settled; no bucket is ever above its limit; the headers are well formed.
//!
//! Input: 4-byte operations: [op, holder mask, amount, time step]. op % 4 == 3 settles the
//! oldest request still open; otherwise op picks limits from a small table and admits.
#![no_main]

use edgegw_core::limits::{Decision, Ledger, Limits};
use libfuzzer_sys::fuzz_target;

const NAMES: [&str; 2] = ["t/a", "k/a/k"];

fn limits(pick: u8) -> Limits {
    let table = [None, Some(1), Some(3), Some(60)];
    Limits {
        rpm: table[usize::from(pick & 3)],
        tpm: table[usize::from((pick >> 2) & 3)].map(|t| t * 100),
        concurrency: table[usize::from((pick >> 4) & 3)],
    }
}

fuzz_target!(|data: &[u8]| {
    let mut ledger = Ledger::new();
    let mut now = 0.0;
    let mut open: Vec<(Vec<&str>, u64)> = Vec::new();
    for op in data.chunks_exact(4) {
        now += f64::from(op[3]) / 8.0;
        if op[0] % 4 == 3 {
            if !open.is_empty() {
                let (names, estimate) = open.remove(0);
                ledger.settle(&names, estimate, u64::from(op[2]) * 7);
            }
            continue;
        }
        let rows: Vec<(&str, Limits)> = NAMES
            .iter()
            .enumerate()
            .filter(|(i, _)| op[1] & (1 << i) != 0)
            .map(|(i, n)| (*n, limits(op[0].rotate_left(i as u32 * 3))))
            .filter(|(_, l)| *l != Limits::default())
            .collect();
        let estimate = u64::from(op[2]) * 5;
        let before: Vec<_> = NAMES.iter().map(|n| ledger.levels(n)).collect();
        match ledger.admit(&rows, estimate, now) {
            Decision::Admitted(t) => {
                for (level, limit) in [t.requests, t.tokens].into_iter().flatten() {
                    assert!(level <= limit as f64);
                }
                assert!(t.headers().iter().all(|(n, v)| n.starts_with("x-ratelimit-")
                    && !v.is_empty()
                    && v.bytes().all(|b| b.is_ascii_alphanumeric())));
                open.push((rows.iter().map(|(n, _)| *n).collect(), estimate));
            }
            Decision::Refused(r, _) => {
                assert!(r.row < rows.len() && r.longest_s >= r.wait_s && r.wait_s > 0.0);
                for (i, n) in NAMES.iter().enumerate() {
                    let (after, was) = (ledger.levels(n), before[i]);
                    // Refilled, or capped at a lowered limit, never charged; no request added.
                    let row = rows.iter().find(|(name, _)| name == n).map(|(_, l)| *l);
                    if let (Some(a), Some(b)) = (after, was) {
                        assert_eq!(a.2, b.2);
                        let caps = [row.and_then(|l| l.rpm), row.and_then(|l| l.tpm)];
                        for ((x, y), cap) in [(a.0, b.0), (a.1, b.1)].into_iter().zip(caps) {
                            if let (Some(x), Some(y)) = (x, y) {
                                match cap {
                                    Some(cap) => assert!(x >= y.min(cap as f64)),
                                    None => assert_eq!(x, y),
                                }
                            }
                        }
                    }
                }
            }
        }
        for n in NAMES {
            let active = open.iter().filter(|(names, _)| names.contains(&n)).count() as u64;
            assert_eq!(ledger.levels(n).map_or(0, |l| l.2), active);
        }
    }
});
