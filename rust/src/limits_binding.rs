//! The tenants' ledger's binding (rust/src/limits.rs): one call admits a request, one settles
//! it, with the rate-limit headers built here (in Python they were most of a limited request's
//! added cost; bench/README.md, "Tenants, limits and budgets").

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyTuple};

use crate::limits::{self, Decision, Limits, Tightest};

/// A `keyfile.Limits` (rpm, tpm, concurrency: int or None) as the ledger's.
fn limits_of(obj: &Bound<'_, PyAny>) -> PyResult<Limits> {
    let py = obj.py();
    Ok(Limits {
        rpm: obj.getattr(intern!(py, "rpm"))?.extract()?,
        tpm: obj.getattr(intern!(py, "tpm"))?.extract()?,
        concurrency: obj.getattr(intern!(py, "concurrency"))?.extract()?,
    })
}

/// A token count as the ledger's: a count past u64 (an upstream's absurd usage) saturates,
/// a negative one is 0.
fn count(obj: &Bound<'_, PyAny>) -> u64 {
    obj.extract::<u64>().unwrap_or_else(|_| {
        if obj.lt(0).unwrap_or(true) {
            0
        } else {
            u64::MAX
        }
    })
}

/// The header names as bytes objects, made once.
static NAMES: PyOnceLock<[[Py<PyBytes>; 3]; 2]> = PyOnceLock::new();

/// The x-ratelimit-* headers of the tightest buckets, as (name, value) bytes pairs, each
/// value written straight into its bytes object.
fn header_tuple<'py>(py: Python<'py>, t: &Tightest) -> PyResult<Bound<'py, PyTuple>> {
    let names = NAMES.get_or_init(py, || {
        limits::HEADER_NAMES.map(|kind| kind.map(|n| PyBytes::new(py, n.as_bytes()).unbind()))
    });
    let mut pairs = Vec::with_capacity(6);
    let mut buf = Vec::with_capacity(48);
    for (kind, tightest) in [t.requests, t.tokens].into_iter().enumerate() {
        let Some((level, limit)) = tightest else {
            continue;
        };
        buf.clear();
        let ends = limits::kind_values(level, limit, &mut buf);
        let mut from = 0;
        for (name, to) in names[kind].iter().zip(ends) {
            let value = PyBytes::new(py, &buf[from..to]).into_any();
            pairs.push(PyTuple::new(py, [name.bind(py).clone().into_any(), value])?);
            from = to;
        }
    }
    PyTuple::new(py, pairs)
}

/// This process's tenant and key counters (`Tenancy`'s, edgegw/tenants/admission.py).
#[pyclass(module = "edgegw._core")]
pub struct Ledger {
    inner: limits::Ledger,
}

/// The refusal as Python reads it: (row 0 tenant / 1 key, kind "r" "t" "c", limit, its wait,
/// the longest wait).
type RefusalRow = (usize, &'static str, u64, f64, f64);

#[pymethods]
impl Ledger {
    #[new]
    fn new() -> Self {
        Ledger {
            inner: limits::Ledger::new(),
        }
    }

    /// Admit a request of `estimate` tokens for the tenant's and the key's holders under
    /// their limits (a Limits without any is no row), at `now` (monotonic seconds):
    /// (x-ratelimit-* headers, rows held as bits (1 tenant, 2 key), None) when charged,
    /// (headers, 0, refusal) when not.
    #[allow(clippy::too_many_arguments)]
    fn admit<'py>(
        &mut self,
        py: Python<'py>,
        tenant: &str,
        tenant_limits: &Bound<'py, PyAny>,
        key: &str,
        key_limits: &Bound<'py, PyAny>,
        estimate: &Bound<'py, PyAny>,
        now: f64,
    ) -> PyResult<(Bound<'py, PyTuple>, u8, Option<RefusalRow>)> {
        let mut rows: [(&str, Limits); 2] = [("", Limits::default()); 2];
        let (mut n, mut held, mut bits) = (0, 0u8, [0u8; 2]);
        for (bit, name, obj) in [(1u8, tenant, tenant_limits), (2u8, key, key_limits)] {
            let l = limits_of(obj)?;
            if l != Limits::default() {
                rows[n] = (name, l);
                bits[n] = bit;
                held |= bit;
                n += 1;
            }
        }
        Ok(match self.inner.admit(&rows[..n], count(estimate), now) {
            Decision::Admitted(t) => (header_tuple(py, &t)?, held, None),
            Decision::Refused(r, t) => {
                let row = if bits[r.row] == 1 { 0 } else { 1 };
                let refusal = (row, r.kind.as_str(), r.limit, r.wait_s, r.longest_s);
                (header_tuple(py, &t)?, 0, Some(refusal))
            }
        })
    }

    /// A request admitted with `held` (admit's bits) ended: its slots returned, its token
    /// charge corrected from `estimate` to `used`.
    fn settle(
        &mut self,
        tenant: &str,
        key: &str,
        held: u8,
        estimate: &Bound<'_, PyAny>,
        used: &Bound<'_, PyAny>,
    ) {
        let (estimate, used) = (count(estimate), count(used));
        match held {
            1 => self.inner.settle(&[tenant], estimate, used),
            2 => self.inner.settle(&[key], estimate, used),
            3 => self.inner.settle(&[tenant, key], estimate, used),
            _ => {}
        }
    }

    /// A holder's (requests level, tokens level, requests at once); None before its first
    /// limited request.
    fn levels(&self, name: &str) -> Option<(Option<f64>, Option<f64>, u64)> {
        self.inner.levels(name)
    }
}

/// The x-ratelimit-* headers of the tightest requests and tokens buckets, (level, limit)
/// each or None (the Redis path's, whose levels its script returns).
#[pyfunction]
fn rate_limit_headers<'py>(
    py: Python<'py>,
    requests: Option<(f64, u64)>,
    tokens: Option<(f64, u64)>,
) -> PyResult<Bound<'py, PyTuple>> {
    header_tuple(py, &Tightest { requests, tokens })
}

/// OpenAI's reset format: `20ms`, `1s`, `6m0s`, `1h2m3s`.
#[pyfunction]
fn duration_text(seconds: f64) -> String {
    limits::duration_text(seconds)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Ledger>()?;
    m.add_function(wrap_pyfunction!(rate_limit_headers, m)?)?;
    m.add_function(wrap_pyfunction!(duration_text, m)?)?;
    m.add("CONCURRENCY_RETRY_S", limits::CONCURRENCY_RETRY_S)?;
    Ok(())
}
