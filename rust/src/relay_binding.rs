//! The core relay's binding (rust/src/relay.rs, rust/src/relay_loop.rs): the relay thread
//! as `CoreRelay`, and what a stream taken back from it counted as `RelayEnd`.

use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::binding::ResponseParser;
use crate::relay::{Relay, Stop};
use crate::relay_loop::{End, RelayLoop};
use crate::sse::DEFAULT_MAX_EVENT_BYTES;

/// The relay thread: `start` hands it a stream, `done_fd` is readable when some finished,
/// `finished()` says which, `overdue(now)` which made no progress for their limit by the
/// caller's clock, `take(id, parser)` takes one back (finished or not) with the upstream's
/// framing restored into `parser`.
/// `close()` stops the thread and closes its descriptors (the server's, when it is done);
/// after it `take` finds nothing and `start` raises.
#[pyclass(module = "edgegw._core")]
struct CoreRelay {
    inner: Option<RelayLoop>,
}

impl CoreRelay {
    fn running(&self) -> PyResult<&RelayLoop> {
        self.inner
            .as_ref()
            .ok_or_else(|| PyOSError::new_err("the relay thread is closed"))
    }
}

/// A stream taken back: how it ended (`ended`: over whole, its terminator written;
/// `code`/`message`: a fault whose error event the caller writes; `client_gone`; `running`:
/// taken back before it ended, or before its last bytes were out),
/// its count of events, `done`, the `tapped` events' data, and the client writes' times
/// (seconds from the hand-over) and gaps (GAP_BUCKETS + 1 counts, None before a second).
#[pyclass(frozen, module = "edgegw._core")]
struct RelayEnd {
    #[pyo3(get)]
    ended: bool,
    #[pyo3(get)]
    code: Option<&'static str>,
    #[pyo3(get)]
    message: Option<String>,
    #[pyo3(get)]
    client_gone: bool,
    #[pyo3(get)]
    running: bool,
    #[pyo3(get)]
    events: u64,
    #[pyo3(get)]
    done: bool,
    #[pyo3(get)]
    tapped: Vec<Py<PyBytes>>,
    #[pyo3(get)]
    first_write_s: Option<f64>,
    #[pyo3(get)]
    last_write_s: Option<f64>,
    #[pyo3(get)]
    gaps: Option<Vec<u64>>,
    #[pyo3(get)]
    gap_total: f64,
}

#[pymethods]
impl CoreRelay {
    #[new]
    fn new() -> PyResult<Self> {
        let inner = RelayLoop::new().map_err(|e| PyOSError::new_err(e.to_string()))?;
        Ok(CoreRelay { inner: Some(inner) })
    }

    #[getter]
    fn done_fd(&self) -> PyResult<i32> {
        Ok(self.running()?.done_fd())
    }

    fn close(&mut self) {
        self.inner = None; // joins the thread; its descriptors close with the last reference
    }

    /// Hands a stream over; its framing state is moved out of `parser`. `head`: the
    /// client's answer head, to write with the first events (b"" when it is out). `first`:
    /// body bytes read with the upstream's head; `complete`: the body ended with them.
    /// `now`, `idle_s` and `stall_s`: its deadlines on the caller's clock (`overdue`).
    /// (id, over): over, the stream ended here and is to be taken back at once.
    #[pyo3(signature = (
        upstream_fd, client_fd, parser, head, secret, hide_usage, first, complete, now, idle_s,
        stall_s
    ))]
    #[allow(clippy::too_many_arguments)]
    fn start(
        &self,
        upstream_fd: i32,
        client_fd: i32,
        parser: &Bound<'_, ResponseParser>,
        head: &[u8],
        secret: Option<&[u8]>,
        hide_usage: bool,
        first: &[u8],
        complete: bool,
        now: f64,
        idle_s: f64,
        stall_s: f64,
    ) -> PyResult<(u64, bool)> {
        let relay_loop = self.running()?;
        let framing = std::mem::replace(
            &mut parser.borrow_mut().inner,
            crate::http1::ResponseParser::new(false),
        );
        let relay = Relay::new(
            framing,
            secret.unwrap_or_default().to_vec(),
            hide_usage,
            DEFAULT_MAX_EVENT_BYTES,
        );
        Ok(relay_loop.start(
            upstream_fd,
            client_fd,
            relay,
            head,
            (first, complete),
            (now, idle_s, stall_s),
        ))
    }

    fn finished(&self) -> Vec<u64> {
        self.inner
            .as_ref()
            .map(RelayLoop::finished)
            .unwrap_or_default()
    }

    fn overdue(&self, now: f64) -> Vec<(u64, bool)> {
        self.inner
            .as_ref()
            .map(|l| l.overdue(now))
            .unwrap_or_default()
    }

    fn take(
        &self,
        py: Python<'_>,
        id: u64,
        parser: &Bound<'_, ResponseParser>,
    ) -> Option<RelayEnd> {
        let mut s = self.inner.as_ref()?.take(id)?;
        parser.borrow_mut().inner = s.relay.take_parser();
        let (ended, fault, client_gone) = match &s.end {
            None => (false, None, false),
            Some(End::Relay(Stop::Ended)) => (true, None, false),
            Some(End::Relay(Stop::Fault(code, message))) => {
                (false, Some((*code, message.clone())), false)
            }
            Some(End::UpstreamLost) => (
                false,
                Some((
                    "upstream_connection_lost",
                    "the connection to the upstream was lost".to_string(),
                )),
                false,
            ),
            Some(End::ClientGone) => (false, None, true),
        };
        let writes = s.gaps.iter().sum::<u64>();
        Some(RelayEnd {
            ended,
            code: fault.as_ref().map(|f| f.0),
            message: fault.map(|f| f.1),
            client_gone,
            running: !s.is_finished(),
            events: s.relay.events,
            done: s.relay.done,
            tapped: s
                .relay
                .tapped
                .iter()
                .map(|d| PyBytes::new(py, d).unbind())
                .collect(),
            first_write_s: s.first_write,
            last_write_s: s.last_write,
            gaps: (writes > 0).then(|| s.gaps.to_vec()),
            gap_total: s.gap_total,
        })
    }

    fn __len__(&self) -> usize {
        self.inner.as_ref().map_or(0, RelayLoop::len)
    }
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<CoreRelay>()?;
    m.add_class::<RelayEnd>()?;
    Ok(())
}
