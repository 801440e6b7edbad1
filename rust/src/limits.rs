//! Tenants' rate limits in one process, as token buckets: the ledger edgegw/tenants/admission.py
//! admits through, with OpenAI's `x-ratelimit-*` header values. Pure: no clock (the caller
//! passes `now`), no I/O.
//!
//! A bucket holds up to `limit` units and refills `limit` per minute, continuously (a limit of
//! 60 rpm admits a burst of 60, then one a second). A request needs one unit of a requests
//! bucket; a token bucket is charged the request's estimate and may go into debt (a request
//! larger than what is left waits until the bucket is full, then is admitted: otherwise a
//! prompt above the limit could never pass), and is settled with the real usage when the
//! request ends. Every limit of a request is checked before any is charged, so a refusal costs
//! nothing.

use std::collections::HashMap;

pub const WINDOW_S: f64 = 60.0;
/// A concurrency refusal cannot know when a slot frees: retry after this.
pub const CONCURRENCY_RETRY_S: f64 = 1.0;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bucket {
    pub level: f64,
    at: f64,
}

impl Bucket {
    pub fn full(limit: u64, now: f64) -> Bucket {
        Bucket {
            level: limit as f64,
            at: now,
        }
    }

    /// The level at `now` (a lowered limit caps it at once).
    pub fn refill(&mut self, limit: u64, now: f64) -> f64 {
        if now > self.at {
            self.level = (limit as f64).min(self.level + (now - self.at) * limit as f64 / WINDOW_S);
            self.at = now;
        } else if self.level > limit as f64 {
            self.level = limit as f64;
        }
        self.level
    }
}

/// What the bucket must hold to admit `amount` (never more than a full bucket).
pub fn need(limit: u64, amount: u64) -> f64 {
    amount.min(limit) as f64
}

/// How long until the bucket holds `need(limit, amount)`; 0 when it does.
pub fn wait_s(limit: u64, level: f64, amount: u64) -> f64 {
    ((need(limit, amount) - level) * WINDOW_S / limit as f64).max(0.0)
}

/// How long until the bucket is full again.
pub fn reset_s(limit: u64, level: f64) -> f64 {
    ((limit as f64 - level) * WINDOW_S / limit as f64).max(0.0)
}

/// OpenAI's reset format: `20ms`, `1s`, `6m0s`, `1h2m3s` (Go's duration, rounded up to the
/// millisecond below a second and to the second above).
pub fn duration_text(seconds: f64) -> String {
    if seconds < 1.0 {
        return format!("{}ms", (seconds * 1000.0).ceil() as i64);
    }
    let whole = seconds.ceil() as u64;
    let (hours, rest) = (whole / 3600, whole % 3600);
    let (minutes, secs) = (rest / 60, rest % 60);
    if hours > 0 {
        format!("{hours}h{minutes}m{secs}s")
    } else if minutes > 0 {
        format!("{minutes}m{secs}s")
    } else {
        format!("{secs}s")
    }
}

/// The kinds of limit, as their headers name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Requests,
    Tokens,
    Concurrency,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Requests => "r",
            Kind::Tokens => "t",
            Kind::Concurrency => "c",
        }
    }
}

/// The header names of each kind, requests then tokens: limit, remaining, reset.
pub const HEADER_NAMES: [[&str; 3]; 2] = [
    [
        "x-ratelimit-limit-requests",
        "x-ratelimit-remaining-requests",
        "x-ratelimit-reset-requests",
    ],
    [
        "x-ratelimit-limit-tokens",
        "x-ratelimit-remaining-tokens",
        "x-ratelimit-reset-tokens",
    ],
];

/// The limit, remaining and reset values of a bucket's (level, limit), appended to `out`
/// (no allocation of their own: every limited answer carries six); their ends in `out`.
/// The remaining count is floored, never below 0.
pub fn kind_values(level: f64, limit: u64, out: &mut Vec<u8>) -> [usize; 3] {
    use std::io::Write;
    let reset = reset_s(limit, level);
    let remaining = if level > 0.0 { level as u64 } else { 0 };
    let _ = write!(out, "{limit}");
    let limit_end = out.len();
    let _ = write!(out, "{remaining}");
    let remaining_end = out.len();
    if reset < 1.0 {
        // Under a second, as every answer of a lightly used limit has it.
        let _ = write!(out, "{}ms", (reset * 1000.0).ceil() as i64);
    } else {
        out.extend_from_slice(duration_text(reset).as_bytes());
    }
    [limit_end, remaining_end, out.len()]
}

/// `x-ratelimit-limit-`, `-remaining-` and `-reset-` `name`d (requests 0, tokens 1) for a
/// bucket's (level, limit), as text.
pub fn kind_headers(kind: usize, level: f64, limit: u64) -> [(String, String); 3] {
    let mut buf = Vec::new();
    let ends = kind_values(level, limit, &mut buf);
    let text = |from: usize, to: usize| String::from_utf8_lossy(&buf[from..to]).into_owned();
    [
        (HEADER_NAMES[kind][0].into(), text(0, ends[0])),
        (HEADER_NAMES[kind][1].into(), text(ends[0], ends[1])),
        (HEADER_NAMES[kind][2].into(), text(ends[1], ends[2])),
    ]
}

/// The tightest (least left, then the lower limit) of each kind: (level, limit).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Tightest {
    pub requests: Option<(f64, u64)>,
    pub tokens: Option<(f64, u64)>,
}

impl Tightest {
    fn take(slot: &mut Option<(f64, u64)>, level: f64, limit: u64) {
        if slot.is_none_or(|held| (level, limit) < held) {
            *slot = Some((level, limit));
        }
    }

    /// The headers of both kinds, requests first; none for a kind without a limit.
    pub fn headers(&self) -> Vec<(String, String)> {
        let mut out = Vec::with_capacity(6);
        for (kind, tightest) in [self.requests, self.tokens].into_iter().enumerate() {
            if let Some((level, limit)) = tightest {
                out.extend(kind_headers(kind, level, limit));
            }
        }
        out
    }
}

/// A tenant's or key's limits; None: unlimited.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limits {
    pub rpm: Option<u64>,
    pub tpm: Option<u64>,
    pub concurrency: Option<u64>,
}

/// One tenant's or key's counters.
#[derive(Debug, Default)]
struct Holder {
    requests: Option<Bucket>,
    tokens: Option<Bucket>,
    active: u64,
    /// The token limit its last admission was charged under: the cap of a settlement's refund.
    tpm: Option<u64>,
}

/// Why a request was refused: the first limit it does not fit (in the order of the rows, and
/// in a row concurrency, requests, tokens), its wait, and the longest wait of all it does not
/// fit (the Retry-After).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Refusal {
    pub row: usize,
    pub kind: Kind,
    pub limit: u64,
    pub wait_s: f64,
    pub longest_s: f64,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Decision {
    /// Charged; the tightest buckets after the charge.
    Admitted(Tightest),
    /// Nothing charged; the tightest buckets as they are.
    Refused(Refusal, Tightest),
}

/// The counters of this process, by holder name (`t/<tenant>`, `k/<tenant>/<key>`). Limits
/// are passed at each request, so a re-read key file applies at once.
#[derive(Debug, Default)]
pub struct Ledger {
    holders: HashMap<String, Holder>,
}

impl Ledger {
    pub fn new() -> Ledger {
        Ledger::default()
    }

    /// Refill, check and (when every limit fits) charge the holders of `rows` for a request of
    /// `estimate` tokens.
    pub fn admit(&mut self, rows: &[(&str, Limits)], estimate: u64, now: f64) -> Decision {
        let mut fits = true;
        for (name, limits) in rows {
            let holder = match self.holders.get_mut(*name) {
                Some(h) => h,
                None => self.holders.entry((*name).to_owned()).or_default(),
            };
            if let Some(rpm) = limits.rpm {
                let bucket = holder
                    .requests
                    .get_or_insert_with(|| Bucket::full(rpm, now));
                fits &= bucket.refill(rpm, now) >= 1.0;
            }
            if let Some(tpm) = limits.tpm {
                let bucket = holder.tokens.get_or_insert_with(|| Bucket::full(tpm, now));
                fits &= bucket.refill(tpm, now) >= need(tpm, estimate);
            }
            if limits.concurrency.is_some_and(|c| holder.active >= c) {
                fits = false;
            }
        }
        let mut tightest = Tightest::default();
        if !fits {
            let refusal = self.refusal(rows, estimate);
            for (name, limits) in rows {
                let holder = &self.holders[*name];
                if let (Some(b), Some(rpm)) = (holder.requests, limits.rpm) {
                    Tightest::take(&mut tightest.requests, b.level, rpm);
                }
                if let (Some(b), Some(tpm)) = (holder.tokens, limits.tpm) {
                    Tightest::take(&mut tightest.tokens, b.level, tpm);
                }
            }
            return Decision::Refused(refusal, tightest);
        }
        for (name, limits) in rows {
            let holder = self.holders.get_mut(*name).expect("made above");
            if let (Some(b), Some(rpm)) = (holder.requests.as_mut(), limits.rpm) {
                b.level -= 1.0;
                Tightest::take(&mut tightest.requests, b.level, rpm);
            }
            if let (Some(b), Some(tpm)) = (holder.tokens.as_mut(), limits.tpm) {
                b.level -= estimate as f64;
                Tightest::take(&mut tightest.tokens, b.level, tpm);
            }
            holder.tpm = limits.tpm;
            holder.active += 1;
        }
        Decision::Admitted(tightest)
    }

    /// The first limit of `rows` the request does not fit, with the longest wait.
    fn refusal(&self, rows: &[(&str, Limits)], estimate: u64) -> Refusal {
        let mut found: Option<Refusal> = None;
        let mut longest: f64 = 0.0;
        let mut note = |row: usize, kind: Kind, limit: u64, wait: f64| {
            longest = longest.max(wait);
            found.get_or_insert(Refusal {
                row,
                kind,
                limit,
                wait_s: wait,
                longest_s: 0.0,
            });
        };
        for (row, (name, limits)) in rows.iter().enumerate() {
            let holder = &self.holders[*name];
            if let Some(c) = limits.concurrency.filter(|c| holder.active >= *c) {
                note(row, Kind::Concurrency, c, CONCURRENCY_RETRY_S);
            }
            if let (Some(b), Some(rpm)) = (holder.requests, limits.rpm) {
                let w = wait_s(rpm, b.level, 1);
                if w > 0.0 {
                    note(row, Kind::Requests, rpm, w);
                }
            }
            if let (Some(b), Some(tpm)) = (holder.tokens, limits.tpm) {
                let w = wait_s(tpm, b.level, estimate);
                if w > 0.0 {
                    note(row, Kind::Tokens, tpm, w);
                }
            }
        }
        let mut refusal = found.expect("admit() refuses only what does not fit");
        refusal.longest_s = longest;
        refusal
    }

    /// A request of the holders `names` ended: its slot returned, its token charge corrected
    /// from `estimate` to `used` (never above a full bucket).
    pub fn settle(&mut self, names: &[&str], estimate: u64, used: u64) {
        for name in names {
            let Some(holder) = self.holders.get_mut(*name) else {
                continue;
            };
            holder.active = holder.active.saturating_sub(1);
            if let (Some(b), Some(tpm)) = (holder.tokens.as_mut(), holder.tpm) {
                b.level = (tpm as f64).min(b.level + estimate as f64 - used as f64);
            }
        }
    }

    /// A holder's (requests level, tokens level, requests at once), for tests and inspection.
    pub fn levels(&self, name: &str) -> Option<(Option<f64>, Option<f64>, u64)> {
        self.holders.get(name).map(|h| {
            (
                h.requests.map(|b| b.level),
                h.tokens.map(|b| b.level),
                h.active,
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RPM: Limits = Limits {
        rpm: Some(2),
        tpm: None,
        concurrency: None,
    };

    #[test]
    fn durations_are_openais() {
        let texts: Vec<String> = [0.0, 0.0204, 1.0, 1.2, 59.0, 360.0, 3723.0]
            .into_iter()
            .map(duration_text)
            .collect();
        assert_eq!(texts, ["0ms", "21ms", "1s", "2s", "59s", "6m0s", "1h2m3s"]);
    }

    #[test]
    fn a_bucket_admits_its_burst_then_refills_continuously() {
        let mut ledger = Ledger::new();
        let rows = [("t/a", RPM)];
        assert!(matches!(ledger.admit(&rows, 0, 0.0), Decision::Admitted(_)));
        assert!(matches!(ledger.admit(&rows, 0, 0.0), Decision::Admitted(_)));
        let Decision::Refused(r, t) = ledger.admit(&rows, 0, 0.0) else {
            panic!("a third request within the burst of 2 was admitted");
        };
        assert_eq!((r.row, r.kind, r.limit), (0, Kind::Requests, 2));
        assert_eq!(r.wait_s, 30.0);
        assert_eq!(t.requests, Some((0.0, 2)));
        // Half a minute later one request's worth has come back.
        assert!(matches!(
            ledger.admit(&rows, 0, 30.0),
            Decision::Admitted(_)
        ));
    }

    #[test]
    fn every_limit_is_checked_before_any_is_charged() {
        let mut ledger = Ledger::new();
        let tenant = Limits {
            rpm: Some(100),
            tpm: Some(1000),
            concurrency: None,
        };
        let key = Limits {
            concurrency: Some(1),
            ..Limits::default()
        };
        let rows = [("t/a", tenant), ("k/a/k", key)];
        let Decision::Admitted(t) = ledger.admit(&rows, 400, 0.0) else {
            panic!("refused");
        };
        assert_eq!(t.requests, Some((99.0, 100)));
        assert_eq!(t.tokens, Some((600.0, 1000)));
        let Decision::Refused(r, _) = ledger.admit(&rows, 400, 0.0) else {
            panic!("a second request at once was admitted");
        };
        assert_eq!((r.row, r.kind, r.longest_s), (1, Kind::Concurrency, 1.0));
        assert_eq!(ledger.levels("t/a"), Some((Some(99.0), Some(600.0), 1)));
        ledger.settle(&["t/a", "k/a/k"], 400, 150);
        assert_eq!(ledger.levels("t/a"), Some((Some(99.0), Some(850.0), 0)));
        assert_eq!(ledger.levels("k/a/k"), Some((None, None, 0)));
    }

    #[test]
    fn a_request_larger_than_the_limit_waits_for_a_full_bucket_then_passes() {
        let mut ledger = Ledger::new();
        let rows = [(
            "k/a/k",
            Limits {
                tpm: Some(100),
                ..Limits::default()
            },
        )];
        assert!(matches!(
            ledger.admit(&rows, 250, 0.0),
            Decision::Admitted(_)
        ));
        let Decision::Refused(r, t) = ledger.admit(&rows, 250, 6.0) else {
            panic!("admitted in debt");
        };
        // -150 + 10 refilled: 240 to a full bucket, at 100 a minute.
        assert_eq!((r.kind, r.wait_s), (Kind::Tokens, 144.0));
        assert_eq!(t.tokens, Some((-140.0, 100)));
        assert_eq!(
            t.headers()[1..],
            [
                ("x-ratelimit-remaining-tokens".into(), "0".into()),
                ("x-ratelimit-reset-tokens".into(), "2m24s".into()),
            ]
        );
    }

    #[test]
    fn headers_floor_the_remaining_and_count_a_short_reset_in_milliseconds() {
        let h = kind_headers(0, 59.5, 60);
        assert_eq!(h[0], ("x-ratelimit-limit-requests".into(), "60".into()));
        assert_eq!(h[1].1, "59");
        assert_eq!(h[2].1, "500ms");
        assert_eq!(kind_headers(1, 60.0, 60)[2].1, "0ms");
    }

    #[test]
    fn a_settlement_never_fills_past_the_limit() {
        let mut ledger = Ledger::new();
        let rows = [(
            "t/a",
            Limits {
                tpm: Some(100),
                ..Limits::default()
            },
        )];
        ledger.admit(&rows, 80, 0.0);
        ledger.settle(&["t/a", "t/unknown"], 80, 0);
        assert_eq!(ledger.levels("t/a"), Some((None, Some(100.0), 0)));
    }
}
