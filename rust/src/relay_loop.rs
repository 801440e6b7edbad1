//! The relay's I/O: one thread per process moves the bytes of every stream handed to it, from
//! its upstream socket through its [`Relay`] to its client socket, with no Python and no GIL
//! between a read and a write (bench/README.md, "The relay in the core", has what a relayed
//! event cost through Trio and what it costs here).
//!
//! The gateway hands over a stream once its head went to the client: the two sockets (still
//! owned by Python, which keeps them open until it takes the stream back), the framing state,
//! and the body bytes read with the head. The thread reads the upstream when it is readable,
//! writes what the relay made at once, and while the client cannot take more it stops
//! reading (the upstream's own flow control then holds the rest). The client's socket is
//! watched for a hang-up all along: a client gone while its upstream is silent ends the
//! stream at once, and the gateway starts no disconnect watch of its own for it; a client
//! that hangs up once it has the events up to `[DONE]` had the whole stream, and the upstream
//! is read on to its end, for its connection to be kept. A stream
//! that ends (over whole, a fault, the client gone) is put on the finished list and the
//! gateway is woken through one eventfd (`done_fd`); it then takes the stream back with
//! what it counted. A whole stream's end (the client's chunked terminator) is written here
//! with its last events; a fault's error event the gateway writes itself. Deadlines stay on
//! the gateway's clock: one task of the gateway calls `overdue(now)` at its own pace, which
//! says which streams made no progress for their limit by that clock, and it takes a stream
//! back at any time (a drain, a stall, a disconnect the gateway saw first), after which the
//! thread never touches its sockets.
//!
//! The only unsafe code of the core is here: the raw system calls on descriptors Python
//! owns. Each is a plain read/send/epoll_ctl on a descriptor that stays open while the
//! stream is in the table (`take` removes it under the same lock the thread holds while it
//! uses one).

use std::collections::HashMap;
use std::io;
use std::os::fd::RawFd;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Instant;

use crate::relay::{Relay, Stop};

/// One upstream read (the gateway's READ_SIZE).
const READ_SIZE: usize = 64 * 1024;
/// Readiness events taken per wait.
const MAX_EVENTS: usize = 256;
/// The epoll key of the wake-up eventfd (stream keys are id * 2 + side).
const WAKE_KEY: u64 = u64::MAX;
/// Inter-token gap buckets: 1 ms doubling (edgegw.answer.GAP_BUCKETS).
pub const GAP_BUCKETS: usize = 15;

/// How a stream ended, beside its relay's own [`Stop`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum End {
    /// The relay stopped (over whole, or a fault of the upstream's bytes).
    Relay(Stop),
    /// Reading the upstream failed (a reset).
    UpstreamLost,
    /// Writing to the client failed: it went away.
    ClientGone,
}

#[derive(Debug)]
pub struct Stream {
    up: RawFd,
    client: RawFd,
    pub relay: Relay,
    /// Client bytes made and not yet written, from `sent` on.
    out: Vec<u8>,
    sent: usize,
    /// The client's socket is full: the upstream is not read until it drains.
    blocked: bool,
    /// Reads that returned bytes, and writes that took some: the gateway's deadlines
    /// watch these move.
    pub reads: u64,
    pub writes: u64,
    /// The deadlines, on the gateway's clock: the counters and `blocked` as last seen by
    /// `overdue`, when (`since`) they last moved, and how long they may stay still: `idle`
    /// while reading the upstream, `stall` while blocked on the client.
    seen: (u64, u64, bool),
    since: f64,
    idle: f64,
    stall: f64,
    pub end: Option<End>,
    /// The client has every byte up to the stream's `[DONE]`: a hang-up or a failed write
    /// after that is no client gone (the official openai SDK closes at `[DONE]`, before the
    /// body's terminator). The stream is then `delivered`: the upstream is read to its end,
    /// for its connection to be kept, and what it still sends is dropped.
    done_out: bool,
    pub delivered: bool,
    /// The client's socket left the epoll set once the stream was delivered.
    client_unwatched: bool,
    finished: bool,
    started: Instant,
    /// Seconds from the hand-over to the first and the last batch written.
    pub first_write: Option<f64>,
    pub last_write: Option<f64>,
    /// The gaps between batches, bucketed (GAP_BUCKETS + 1 counts), and their sum.
    pub gaps: [u64; GAP_BUCKETS + 1],
    pub gap_total: f64,
}

impl Stream {
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// Its end is known and its bytes are out (`drained`), or can never go (the client
    /// gone): it leaves the loop.
    fn over(&self, drained: bool) -> bool {
        self.end.is_some() && (drained || self.end == Some(End::ClientGone))
    }

    /// A batch was made: its time, for TTFT and the gaps.
    fn wrote_batch(&mut self) {
        let now = self.started.elapsed().as_secs_f64();
        if let Some(last) = self.last_write {
            let gap = now - last;
            // bisect_left over 0.001 * 2**k: the first bucket bound at or above the gap.
            let bucket = (0..GAP_BUCKETS)
                .find(|&k| 0.001 * f64::from(1u32 << k) >= gap)
                .unwrap_or(GAP_BUCKETS);
            self.gaps[bucket] += 1;
            self.gap_total += gap;
        } else {
            self.first_write = Some(now);
        }
        self.last_write = Some(now);
    }

    /// Feeds the relay through `f`; a batch that made client bytes is timed.
    fn feed(&mut self, f: impl FnOnce(&mut Relay, &mut Vec<u8>)) {
        let before = self.out.len();
        f(&mut self.relay, &mut self.out);
        if self.out.len() > before {
            self.wrote_batch();
        }
        if let Some(stop) = self.relay.stop() {
            if self.end.is_none() {
                if *stop == Stop::Ended {
                    // The client's body ends here too: its terminator leaves with the last
                    // events, not in a write of the gateway's own.
                    self.out.extend_from_slice(b"0\r\n\r\n");
                }
                self.end = Some(End::Relay(stop.clone()));
            }
        }
    }

    /// Writes what is pending; false when the client cannot take all of it now.
    fn flush(&mut self) -> bool {
        if self.delivered {
            self.out.clear();
            self.sent = 0;
            return true;
        }
        while self.sent < self.out.len() {
            match sys::send(self.client, &self.out[self.sent..]) {
                Ok(n) => {
                    self.sent += n;
                    self.writes += 1;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return false,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    if self.done_out {
                        self.delivered = true;
                    } else {
                        self.end = Some(End::ClientGone);
                    }
                    self.out.clear();
                    self.sent = 0;
                    return true;
                }
            }
        }
        self.out.clear();
        self.sent = 0;
        self.done_out = self.relay.done;
        true
    }

    /// The client closed or reset its side: gone, as the gateway's own disconnect watch
    /// takes a client's end of input; or, after `[DONE]` reached it, done with a whole stream.
    fn hung_up(&mut self) {
        if self.done_out {
            self.delivered = true;
        } else {
            self.end = Some(End::ClientGone);
        }
    }

    /// One read of the upstream, relayed.
    fn on_readable(&mut self, buf: &mut [u8]) {
        match sys::read(self.up, buf) {
            Ok(0) => self.feed(|r, out| {
                r.feed_raw(b"", out);
            }),
            Ok(n) => {
                self.reads += 1;
                self.feed(|r, out| {
                    r.feed_raw(&buf[..n], out);
                });
            }
            Err(e)
                if e.kind() == io::ErrorKind::WouldBlock
                    || e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => self.end = Some(End::UpstreamLost),
        }
    }
}

struct State {
    streams: HashMap<u64, Stream>,
    next_id: u64,
    finished: Vec<u64>,
    stopping: bool,
}

struct Shared {
    epoll: sys::Fd,
    wake: sys::Fd,
    done: sys::Fd,
    state: Mutex<State>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave a stream half-moved in a way the
        // table cares about: each step leaves it whole.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// After a step: a stream whose end is known and whose bytes are out (or can never go)
    /// leaves both interest sets and is reported. Otherwise its interest follows `blocked`.
    fn settle(&self, id: u64, s: &mut Stream, finished: &mut Vec<u64>) {
        let drained = s.flush();
        if s.delivered && !s.client_unwatched {
            // Its hang-up would be reported at every wait, and nothing more is written to it.
            s.client_unwatched = true;
            sys::epoll_del(self.epoll.0, s.client);
        }
        if s.over(drained) {
            unwatch(self.epoll.0, s);
            s.finished = true;
            finished.push(id);
        } else if !drained && !s.blocked {
            s.blocked = true;
            // Deleted, not muted: a hang-up is reported even with no events asked for.
            sys::epoll_del(self.epoll.0, s.up);
            sys::epoll_mod(
                self.epoll.0,
                s.client,
                sys::EPOLLOUT | sys::EPOLLRDHUP,
                id * 2 + 1,
            );
        } else if drained && s.blocked {
            s.blocked = false;
            sys::epoll_mod(self.epoll.0, s.client, sys::EPOLLRDHUP, id * 2 + 1);
            sys::epoll_add(self.epoll.0, s.up, sys::EPOLLIN, id * 2);
        }
    }

    fn run(&self) {
        sys::block_signals();
        let mut events = vec![sys::EpollEvent::default(); MAX_EVENTS];
        let mut buf = vec![0u8; READ_SIZE];
        let mut finished = Vec::new();
        loop {
            let n = sys::epoll_wait(self.epoll.0, &mut events);
            let mut state = self.lock();
            if state.stopping {
                return;
            }
            // The clients' hang-ups first: one reported with its upstream's last events left
            // before they were written, so it is gone, not a client that had `[DONE]`.
            for hung_up in [true, false] {
                for ev in &events[..n] {
                    let key = ev.key();
                    if key == WAKE_KEY {
                        if !hung_up {
                            sys::drain_eventfd(self.wake.0);
                        }
                        continue;
                    }
                    let client_hung_up = key % 2 == 1 && ev.hung_up();
                    if client_hung_up != hung_up {
                        continue;
                    }
                    let id = key / 2;
                    let Some(s) = state.streams.get_mut(&id) else {
                        continue; // taken back since the wait returned
                    };
                    if s.finished {
                        continue;
                    }
                    if client_hung_up {
                        s.hung_up();
                    } else if key % 2 == 0 && !s.blocked {
                        s.on_readable(&mut buf);
                    }
                    self.settle(id, s, &mut finished);
                }
            }
            if !finished.is_empty() {
                state.finished.append(&mut finished);
                drop(state);
                sys::signal_eventfd(self.done.0);
            }
        }
    }
}

/// The relay thread and its table of streams.
pub struct RelayLoop {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl RelayLoop {
    pub fn new() -> io::Result<Self> {
        let epoll = sys::epoll_create()?;
        let wake = sys::eventfd()?;
        let done = sys::eventfd()?;
        sys::epoll_add(epoll.0, wake.0, sys::EPOLLIN, WAKE_KEY);
        let shared = Arc::new(Shared {
            epoll,
            wake,
            done,
            state: Mutex::new(State {
                streams: HashMap::new(),
                next_id: 0,
                finished: Vec::new(),
                stopping: false,
            }),
        });
        let runner = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("edgegw-relay".into())
            .spawn(move || runner.run())?;
        Ok(RelayLoop {
            shared,
            thread: Some(thread),
        })
    }

    /// Readable when streams finished (`finished()` says which).
    pub fn done_fd(&self) -> RawFd {
        self.shared.done.0
    }

    /// Hands a stream over: `head` is the client's answer head, not yet written (it leaves
    /// with the first events); `first` is body read with the upstream's head, `complete`
    /// when the body ended with it; `deadlines` (now, idle, stall) on the gateway's clock
    /// (`overdue`). What it can relay is written here, at once. True with the id when the
    /// stream is over already (all of it read and written, or the client gone): it is not
    /// on the finished list, and the caller takes it back now.
    pub fn start(
        &self,
        up: RawFd,
        client: RawFd,
        relay: Relay,
        head: &[u8],
        (first, complete): (&[u8], bool),
        (now, idle, stall): (f64, f64, f64),
    ) -> (u64, bool) {
        let mut state = self.shared.lock();
        let id = state.next_id;
        state.next_id += 1;
        let mut s = Stream {
            up,
            client,
            relay,
            out: head.to_vec(),
            sent: 0,
            blocked: false,
            reads: 0,
            writes: 0,
            seen: (0, 0, false),
            since: now,
            idle,
            stall,
            end: None,
            done_out: false,
            delivered: false,
            client_unwatched: false,
            finished: false,
            started: Instant::now(),
            first_write: None,
            last_write: None,
            gaps: [0; GAP_BUCKETS + 1],
            gap_total: 0.0,
        };
        if !first.is_empty() || complete {
            s.feed(|r, out| r.feed_body(first, complete, out));
        }
        // Most unpaced streams come whole with the upstream's head: those never enter the
        // epoll set nor wake the gateway through `done_fd`.
        let drained = s.flush();
        let over = s.over(drained);
        if over {
            s.finished = true;
        } else {
            // The client's side is watched for a hang-up all along, so that a client gone
            // while the upstream is silent ends the stream (and its upstream) at once.
            let mut client_events = sys::EPOLLRDHUP;
            if drained {
                sys::epoll_add(self.shared.epoll.0, up, sys::EPOLLIN, id * 2);
            } else {
                s.blocked = true;
                client_events |= sys::EPOLLOUT;
            }
            sys::epoll_add(self.shared.epoll.0, client, client_events, id * 2 + 1);
        }
        state.streams.insert(id, s);
        (id, over)
    }

    /// The streams that finished since the last call.
    pub fn finished(&self) -> Vec<u64> {
        sys::drain_eventfd(self.shared.done.0);
        std::mem::take(&mut self.shared.lock().finished)
    }

    /// The running streams whose counters have not moved for their limit at `now` (the
    /// gateway's clock), each with `blocked` (the client's stall, else the upstream's
    /// silence). One call for every stream: a wake-up of a Trio task per stream and check
    /// was most of the gateway thread's time on a paced stream (bench/README.md). What a
    /// stream waits for being ready already (the upstream readable, the client writable
    /// while blocked) counts as progress: bytes the thread has not yet got to are never
    /// taken for a silence.
    pub fn overdue(&self, now: f64) -> Vec<(u64, bool)> {
        let mut state = self.shared.lock();
        let mut late = Vec::new();
        for (&id, s) in state.streams.iter_mut().filter(|(_, s)| !s.finished) {
            let seen = (s.reads, s.writes, s.blocked);
            if seen != s.seen {
                (s.seen, s.since) = (seen, now);
            } else if now - s.since >= if s.blocked { s.stall } else { s.idle } {
                let ready = if s.blocked {
                    sys::poll_ready(s.client, libc::POLLOUT)
                } else {
                    sys::poll_ready(s.up, libc::POLLIN)
                };
                if ready {
                    s.since = now;
                } else {
                    late.push((id, s.blocked));
                }
            }
        }
        late
    }

    /// Takes a stream back, finished or not: from here on its sockets are the caller's.
    pub fn take(&self, id: u64) -> Option<Stream> {
        let mut state = self.shared.lock();
        let s = state.streams.remove(&id)?;
        if !s.finished {
            unwatch(self.shared.epoll.0, &s);
        }
        Some(s)
    }

    /// Streams in the table.
    pub fn len(&self) -> usize {
        self.shared.lock().streams.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A stream leaves the epoll set: its client always, its upstream unless blocked.
fn unwatch(epoll: RawFd, s: &Stream) {
    if !s.client_unwatched {
        sys::epoll_del(epoll, s.client);
    }
    if !s.blocked {
        sys::epoll_del(epoll, s.up);
    }
}

impl Drop for RelayLoop {
    fn drop(&mut self) {
        self.shared.lock().stopping = true;
        sys::signal_eventfd(self.shared.wake.0);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The system calls, each a thin checked wrapper.
mod sys {
    use std::io;
    use std::os::fd::RawFd;

    pub const EPOLLIN: u32 = libc::EPOLLIN as u32;
    pub const EPOLLOUT: u32 = libc::EPOLLOUT as u32;
    pub const EPOLLRDHUP: u32 = libc::EPOLLRDHUP as u32;

    /// A descriptor the loop owns (epoll, eventfds), closed on drop.
    pub struct Fd(pub RawFd);

    impl Drop for Fd {
        fn drop(&mut self) {
            // SAFETY: the loop created this descriptor and nothing else closes it.
            unsafe { libc::close(self.0) };
        }
    }

    #[derive(Clone, Copy)]
    #[repr(transparent)]
    pub struct EpollEvent(libc::epoll_event);

    impl Default for EpollEvent {
        fn default() -> Self {
            EpollEvent(libc::epoll_event { events: 0, u64: 0 })
        }
    }

    impl std::fmt::Debug for EpollEvent {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "EpollEvent({})", self.key())
        }
    }

    impl EpollEvent {
        pub fn key(&self) -> u64 {
            self.0.u64
        }

        /// The peer closed or reset its side (or the socket is in error).
        pub fn hung_up(&self) -> bool {
            self.0.events & (libc::EPOLLRDHUP | libc::EPOLLHUP | libc::EPOLLERR) as u32 != 0
        }
    }

    fn check(r: libc::c_int) -> io::Result<libc::c_int> {
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(r)
        }
    }

    pub fn epoll_create() -> io::Result<Fd> {
        // SAFETY: no pointers.
        check(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) }).map(Fd)
    }

    pub fn eventfd() -> io::Result<Fd> {
        // SAFETY: no pointers.
        check(unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) }).map(Fd)
    }

    fn epoll_ctl(epoll: RawFd, op: libc::c_int, fd: RawFd, events: u32, key: u64) {
        let mut ev = libc::epoll_event { events, u64: key };
        // SAFETY: `ev` outlives the call. A failure (a descriptor already closed by a peer's
        // reset is still open here: Python closes only after `take`) leaves the stream
        // without interest; its deadline then ends it.
        unsafe { libc::epoll_ctl(epoll, op, fd, &mut ev) };
    }

    pub fn epoll_add(epoll: RawFd, fd: RawFd, events: u32, key: u64) {
        epoll_ctl(epoll, libc::EPOLL_CTL_ADD, fd, events, key);
    }

    pub fn epoll_mod(epoll: RawFd, fd: RawFd, events: u32, key: u64) {
        epoll_ctl(epoll, libc::EPOLL_CTL_MOD, fd, events, key);
    }

    pub fn epoll_del(epoll: RawFd, fd: RawFd) {
        epoll_ctl(epoll, libc::EPOLL_CTL_DEL, fd, 0, 0);
    }

    /// Ready events (none on EINTR).
    pub fn epoll_wait(epoll: RawFd, events: &mut [EpollEvent]) -> usize {
        // SAFETY: the buffer holds `events.len()` events (EpollEvent is transparent).
        let n = unsafe {
            libc::epoll_wait(
                epoll,
                events.as_mut_ptr().cast::<libc::epoll_event>(),
                events.len() as libc::c_int,
                -1,
            )
        };
        usize::try_from(n).unwrap_or(0)
    }

    pub fn read(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
        // SAFETY: `buf` is writable for its length.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        usize::try_from(n).map_err(|_| io::Error::last_os_error())
    }

    /// send(2) without SIGPIPE and without blocking.
    pub fn send(fd: RawFd, data: &[u8]) -> io::Result<usize> {
        // SAFETY: `data` is readable for its length.
        let n = unsafe {
            libc::send(
                fd,
                data.as_ptr().cast(),
                data.len(),
                libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
            )
        };
        usize::try_from(n).map_err(|_| io::Error::last_os_error())
    }

    /// The descriptor is ready for `events` now (or in error: the thread's next step sees it).
    pub fn poll_ready(fd: RawFd, events: libc::c_short) -> bool {
        let mut p = libc::pollfd {
            fd,
            events,
            revents: 0,
        };
        // SAFETY: one pollfd, valid for the call; no wait.
        unsafe { libc::poll(&mut p, 1, 0) > 0 }
    }

    pub fn signal_eventfd(fd: RawFd) {
        let one: u64 = 1;
        // SAFETY: writes the 8 bytes of `one`. A full counter (never, at 2**64 - 2) is
        // still readable, which is all a wake-up needs.
        unsafe { libc::write(fd, (&one as *const u64).cast(), 8) };
    }

    pub fn drain_eventfd(fd: RawFd) {
        let mut count: u64 = 0;
        // SAFETY: reads at most 8 bytes into `count`; non-blocking.
        unsafe { libc::read(fd, (&mut count as *mut u64).cast(), 8) };
    }

    /// The relay thread takes no signal: the process's handlers run on Python's thread.
    pub fn block_signals() {
        // SAFETY: `set` is initialised by sigfillset before use.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigfillset(&mut set);
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http1::ResponseParser;
    use crate::relay::unchunk;
    use crate::sse::DEFAULT_MAX_EVENT_BYTES;
    use std::io::{Read, Write};
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;
    use std::time::Duration;

    fn relay() -> Relay {
        Relay::new(
            ResponseParser::new(false),
            Vec::new(),
            false,
            DEFAULT_MAX_EVENT_BYTES,
        )
    }

    fn wait_finished(l: &RelayLoop, id: u64) {
        for _ in 0..500 {
            if l.finished().contains(&id) {
                return;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        panic!("stream {id} did not finish");
    }

    #[test]
    fn relays_a_stream_between_two_sockets() {
        let l = RelayLoop::new().unwrap();
        let (mut upstream, up) = UnixStream::pair().unwrap();
        let (client, mut reader) = UnixStream::pair().unwrap();
        up.set_nonblocking(true).unwrap();
        client.set_nonblocking(true).unwrap();
        upstream
            .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 32\r\n\r\n")
            .unwrap();
        let mut parser = ResponseParser::new(false);
        let mut head = vec![0u8; 4096];
        let n = (&up).read(&mut head);
        // The head is read by the caller, as the gateway does.
        let n = n.unwrap_or(0);
        let p = parser.feed(&head[..n]).unwrap();
        assert!(p.head.is_some());
        let r = Relay::new(parser, Vec::new(), false, DEFAULT_MAX_EVENT_BYTES);
        let (id, over) = l.start(
            up.as_raw_fd(),
            client.as_raw_fd(),
            r,
            b"HEAD\r\n\r\n",
            (&p.body, p.done),
            (0.0, 60.0, 60.0),
        );
        assert!(!over);
        upstream
            .write_all(b"data: a\n\ndata: b\n\ndata: [DONE]\n\n")
            .unwrap();
        wait_finished(&l, id);
        let s = l.take(id).unwrap();
        assert_eq!(s.end, Some(End::Relay(Stop::Ended)));
        assert_eq!((s.relay.events, s.relay.done), (3, true));
        assert!(s.relay.parser().reusable());
        drop(client);
        let mut got = Vec::new();
        reader.read_to_end(&mut got).unwrap();
        // The held head first, the terminator last.
        let body = got.strip_prefix(b"HEAD\r\n\r\n").unwrap();
        let body = body.strip_suffix(b"0\r\n\r\n").unwrap();
        assert_eq!(
            unchunk(body).unwrap(),
            b"data: a\n\ndata: b\n\ndata: [DONE]\n\n"
        );
        assert!(l.is_empty());
    }

    #[test]
    fn a_stream_whole_at_the_hand_over_ends_in_start() {
        let l = RelayLoop::new().unwrap();
        let (_upstream, up) = UnixStream::pair().unwrap(); // never read: the body came whole
        let (client, mut reader) = UnixStream::pair().unwrap();
        client.set_nonblocking(true).unwrap();
        let whole = b"HTTP/1.1 200 OK\r\ncontent-length: 23\r\n\r\ndata: a\n\ndata: [DONE]\n\n";
        let mut parser = ResponseParser::new(false);
        let p = parser.feed(whole).unwrap();
        assert!(p.done);
        let r = Relay::new(parser, Vec::new(), false, DEFAULT_MAX_EVENT_BYTES);
        let (id, over) = l.start(
            up.as_raw_fd(),
            client.as_raw_fd(),
            r,
            b"H\r\n\r\n",
            (&p.body, p.done),
            (0.0, 60.0, 60.0),
        );
        assert!(over);
        // Taken back at once: never on the finished list, the gateway never woken.
        assert!(l.finished().is_empty());
        let s = l.take(id).unwrap();
        assert_eq!(s.end, Some(End::Relay(Stop::Ended)));
        assert!(s.is_finished() && s.relay.done);
        drop(client);
        let mut got = Vec::new();
        reader.read_to_end(&mut got).unwrap();
        let body = got.strip_prefix(b"H\r\n\r\n").unwrap();
        let body = body.strip_suffix(b"0\r\n\r\n").unwrap();
        assert_eq!(unchunk(body).unwrap(), b"data: a\n\ndata: [DONE]\n\n");
        assert!(l.is_empty());
    }

    /// A stream handed over once its upstream `head` was read: the test's ends of the
    /// upstream and the client, and the relay's (kept open while the stream is in the table).
    struct Handed {
        upstream: UnixStream,
        reader: UnixStream,
        _sockets: (UnixStream, UnixStream),
        id: u64,
    }

    fn handed(l: &RelayLoop, head: &[u8]) -> Handed {
        let (upstream, up) = UnixStream::pair().unwrap();
        let (client, reader) = UnixStream::pair().unwrap();
        up.set_nonblocking(true).unwrap();
        client.set_nonblocking(true).unwrap();
        let mut r = relay();
        let mut out = Vec::new();
        assert!(r.feed_raw(head, &mut out).is_none());
        let fds = (up.as_raw_fd(), client.as_raw_fd());
        let (id, _) = l.start(fds.0, fds.1, r, b"", (b"", false), (0.0, 60.0, 60.0));
        Handed {
            upstream,
            reader,
            _sockets: (up, client),
            id,
        }
    }

    #[test]
    fn a_taken_stream_is_left_alone() {
        let l = RelayLoop::new().unwrap();
        let mut h = handed(&l, b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n");
        assert_eq!(l.overdue(59.0), vec![]);
        assert_eq!(l.overdue(60.0), vec![(h.id, false)]);
        let s = l.take(h.id).unwrap();
        assert!(!s.is_finished() && s.end.is_none());
        h.upstream.write_all(b"5\r\ndata:\r\n").unwrap();
        std::thread::sleep(Duration::from_millis(20));
        assert!(l.finished().is_empty());
        assert_eq!(l.overdue(120.0), vec![]);
    }

    #[test]
    fn progress_moves_the_deadline() {
        let l = RelayLoop::new().unwrap();
        let mut h = handed(&l, b"HTTP/1.1 200 OK\r\n\r\n");
        h.upstream.write_all(b"data: a\n\n").unwrap();
        let mut got = [0u8; 64];
        assert!(h.reader.read(&mut got).unwrap() > 0); // read, relayed and written
        assert_eq!(l.overdue(30.0), vec![]); // seen moving at 30
        assert_eq!(l.overdue(89.0), vec![]);
        assert_eq!(l.overdue(90.0), vec![(h.id, false)]);
        assert!(l.take(h.id).is_some());
    }

    #[test]
    fn a_client_gone_ends_the_stream() {
        let l = RelayLoop::new().unwrap();
        let Handed {
            mut upstream,
            reader,
            _sockets,
            id,
        } = handed(&l, b"HTTP/1.1 200 OK\r\n\r\n");
        drop(reader);
        upstream.write_all(b"data: a\n\n").unwrap();
        wait_finished(&l, id);
        assert_eq!(l.take(id).unwrap().end, Some(End::ClientGone));
    }

    #[test]
    fn a_client_that_leaves_after_done_had_the_whole_stream() {
        // The official openai SDK closes at `[DONE]`, before the body's terminator: the
        // stream is whole, and the upstream is read to its end for its connection.
        let l = RelayLoop::new().unwrap();
        let mut h = handed(&l, b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n");
        let events = b"data: a\n\ndata: [DONE]\n\n";
        let mut chunk = format!("{:x}\r\n", events.len()).into_bytes();
        chunk.extend_from_slice(events);
        chunk.extend_from_slice(b"\r\n");
        h.upstream.write_all(&chunk).unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 256];
        while !got.ends_with(b"data: [DONE]\n\n\r\n") {
            let n = h.reader.read(&mut buf).unwrap();
            assert!(n > 0);
            got.extend_from_slice(&buf[..n]);
        }
        drop(h.reader);
        std::thread::sleep(Duration::from_millis(20));
        assert!(l.finished().is_empty()); // the upstream's end is still to come
        h.upstream.write_all(b"0\r\n\r\n").unwrap();
        wait_finished(&l, h.id);
        let s = l.take(h.id).unwrap();
        assert_eq!(s.end, Some(End::Relay(Stop::Ended)));
        assert!(s.delivered && s.relay.done && s.relay.parser().is_done());
    }

    #[test]
    fn a_client_that_leaves_before_done_is_gone() {
        let l = RelayLoop::new().unwrap();
        let mut h = handed(&l, b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n");
        h.upstream.write_all(b"9\r\ndata: a\n\n\r\n").unwrap();
        let mut buf = [0u8; 256];
        assert!(h.reader.read(&mut buf).unwrap() > 0);
        drop(h.reader);
        wait_finished(&l, h.id);
        let s = l.take(h.id).unwrap();
        assert_eq!(s.end, Some(End::ClientGone));
        assert!(!s.delivered);
    }

    #[test]
    fn a_client_gone_while_the_upstream_is_silent_ends_the_stream() {
        let l = RelayLoop::new().unwrap();
        let h = handed(&l, b"HTTP/1.1 200 OK\r\n\r\n");
        drop(h.reader); // nothing was, or will be, written to it
        wait_finished(&l, h.id);
        assert_eq!(l.take(h.id).unwrap().end, Some(End::ClientGone));
    }
}
