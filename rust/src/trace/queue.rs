//! The queue of ended spans waiting for export, shared by every request's record.

use std::collections::VecDeque;

/// Ended spans waiting for export, and the counts of what became of them: shared by every
/// request's record, which writes its spans here as entries of a batch when its server span
/// ends (`Record::export`), and by the export task, which takes them a batch at a time. At
/// most `limit` spans wait (the SDK's OTEL_BSP_MAX_QUEUE_SIZE); past that a trace's spans
/// are dropped and counted. The entries are one buffer, a trace's after another: nothing
/// allocated a request but the buffer's growth.
#[derive(Debug, Default)]
pub struct Queue {
    pub limit: usize,
    /// Spans waiting, taken or not yet.
    pub pending: usize,
    pub exported: u64,
    /// Spans a batch, at most (a trace's spans stay together).
    pub batch: usize,
    /// Spans dropped: no room when their trace ended; a batch the collector did not take.
    pub queue_full: u64,
    pub export_failed: u64,
    buf: Vec<u8>,
    /// Each waiting trace's entries in `buf`: (bytes, spans), in order.
    traces: VecDeque<(usize, usize)>,
}

impl Queue {
    pub fn new(limit: usize, batch: usize) -> Self {
        Queue {
            limit,
            batch,
            ..Queue::default()
        }
    }

    /// Room for `n` more spans (else they are counted dropped).
    fn admit(&mut self, n: usize) -> bool {
        if self.pending + n > self.limit {
            self.queue_full += n as u64;
            return false;
        }
        self.pending += n;
        true
    }

    /// A trace's `n` ended spans, their entries written to the buffer by `write` when there
    /// is room for them all (else counted dropped): whether a whole batch now waits.
    pub fn push(&mut self, n: usize, write: impl FnOnce(&mut Vec<u8>)) -> bool {
        if self.admit(n) {
            let start = self.buf.len();
            write(&mut self.buf);
            self.traces.push_back((self.buf.len() - start, n));
        }
        self.full()
    }

    /// Whether a whole batch waits.
    pub fn full(&self) -> bool {
        self.pending >= self.batch
    }

    /// The next batch, whole traces up to `batch` spans: `write` gets their entries and how
    /// many spans (and makes the export request of them) before they leave the queue; None
    /// when nothing waits.
    pub fn take<R>(&mut self, write: impl FnOnce(&[u8], usize) -> R) -> Option<R> {
        let (mut len, mut n) = (0, 0);
        while n < self.batch {
            let Some((l, k)) = self.traces.pop_front() else {
                break;
            };
            len += l;
            n += k;
        }
        if n == 0 {
            return None;
        }
        self.pending = self.pending.saturating_sub(n);
        let written = write(&self.buf[..len], n);
        self.buf.drain(..len);
        Some(written)
    }

    /// What became of a batch of `n` spans: exported, or dropped (`export_failed`).
    pub fn done(&mut self, n: usize, ok: bool) {
        if ok {
            self.exported += n as u64;
        } else {
            self.export_failed += n as u64;
        }
    }

    /// Forget what waits (not counted).
    pub fn clear(&mut self) {
        self.buf.clear();
        self.traces.clear();
        self.pending = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::otlp_trace;
    use crate::trace::tests::{T0, TRACE_ID};
    use crate::trace::{Record, INTERNAL};
    use prost::Message;

    /// A traced request of two spans (server and one child) into `queue`, trace id
    /// TRACE_ID + `i`: whether a whole batch then waits.
    fn traced_request(queue: &mut Queue, i: u64) -> bool {
        let mut r = Record::new(TRACE_ID + u128::from(i), String::new(), i + 1, false);
        r.open_server("GET", "/v1/models", "req", None, T0);
        let parse = r
            .child("parse".into(), 0, INTERNAL, T0, Vec::new())
            .unwrap();
        assert!(!r.close(parse, T0 + 1).unwrap());
        assert!(r.finish(Some(200), None, T0 + 2).unwrap());
        r.export(queue)
    }

    #[test]
    fn a_queue_holds_whole_traces_bounded_and_counts_its_drops() {
        let mut queue = Queue::new(5, 4);
        assert!(!traced_request(&mut queue, 0), "2 of 4 spans wait");
        assert!(traced_request(&mut queue, 1), "a whole batch");
        assert!(
            traced_request(&mut queue, 2),
            "no room for 2 more: dropped (the batch still waits)"
        );
        assert_eq!((queue.pending, queue.queue_full), (4, 2));
        let taken = queue.take(|entries, n| (entries.to_vec(), n)).unwrap();
        assert_eq!((taken.1, queue.pending), (4, 0));
        assert_eq!(queue.take(|_, n| n), None);
        // The entries are those of the two traces' spans, in order: a valid batch.
        let request = otlp_trace::pb::ExportTraceServiceRequest::decode(
            &otlp_trace::encode_batch(&Vec::new(), "edgegw", "1", &[&taken.0])[..],
        )
        .unwrap();
        let spans = &request.resource_spans[0].scope_spans[0].spans;
        let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            ["GET /v1/models", "parse", "GET /v1/models", "parse"]
        );
        assert_eq!(spans[1].parent_span_id, spans[0].span_id);
        queue.done(4, true);
        queue.done(2, false);
        assert_eq!((queue.exported, queue.export_failed), (4, 2));
        // A batch holds whole traces: three of two spans, batches of 3 spans, leave as 4 + 2.
        let mut queue = Queue::new(100, 3);
        for i in 0..3 {
            traced_request(&mut queue, i);
        }
        assert_eq!(queue.take(|_, n| n), Some(4));
        assert_eq!(queue.take(|_, n| n), Some(2));
        assert_eq!(queue.take(|_, n| n), None);
        // Cleared: nothing waits, nothing counted.
        traced_request(&mut queue, 0);
        queue.clear();
        assert_eq!((queue.pending, queue.take(|_, n| n)), (0, None));
        assert_eq!((queue.exported, queue.queue_full), (0, 0));
    }
}
