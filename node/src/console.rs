//! The `node` binary's standard output and error: one writer thread each, behind a bounded queue of lines,
//! so that what the process prints can neither stop nor slow the node.
//!
//! - Never blocks: a line is queued without waiting; when the queue is full (a stalled reader — a pipe nobody
//!   reads, a terminal on hold) the line is dropped and counted ([`Console::lines_dropped`]).
//! - Never panics: `println!` panics when the write fails (`node run | head -1` closes the pipe: `EPIPE`; a
//!   redirect to a full disk: `ENOSPC`). Here the first failed write stops writing to that stream for good
//!   (a closed pipe does not reopen); later lines are dropped and counted, and the node trains on.
//! - The log goes through the same kind of queue ([`Console`] is a `tracing` writer), so a stalled stderr
//!   cannot block the task that logs either.

use std::io::{self, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError, sync_channel};
use std::time::Duration;

/// One output stream behind its writer thread. Clones share the queue.
#[derive(Clone)]
pub struct Console {
    tx: SyncSender<Vec<u8>>,
    counts: Arc<Counts>,
}

#[derive(Default)]
struct Counts {
    /// Lines handed to the queue.
    queued: AtomicU64,
    /// Lines the thread is done with (written, or dropped after a failure).
    handled: AtomicU64,
    /// Lines dropped: the queue was full, or the stream had failed.
    dropped: AtomicU64,
    failed: AtomicBool,
}

impl Console {
    /// Starts the thread writing to `out` (named `stream` in its one warning), with room for `capacity`
    /// lines waiting.
    pub fn spawn(stream: &'static str, out: impl Write + Send + 'static, capacity: usize) -> Self {
        let (tx, rx) = sync_channel::<Vec<u8>>(capacity);
        let counts = Arc::new(Counts::default());
        let c = counts.clone();
        std::thread::Builder::new()
            .name(format!("console-{stream}"))
            .spawn(move || {
                let mut out = out;
                for bytes in rx {
                    if !c.failed.load(Ordering::Relaxed) {
                        if let Err(e) = write_all(&mut out, &bytes) {
                            c.failed.store(true, Ordering::Relaxed);
                            c.dropped.fetch_add(1, Ordering::Relaxed);
                            // Goes to the log's own queue: if that stream is the one that failed, it is
                            // dropped there like any other line.
                            tracing::warn!(stream, error = %e, "cannot write there any more; the node goes on without it");
                        }
                    } else {
                        c.dropped.fetch_add(1, Ordering::Relaxed);
                    }
                    c.handled.fetch_add(1, Ordering::Release);
                }
            })
            .expect("spawn a console thread");
        Self { tx, counts }
    }

    /// The standard output, with room for `capacity` lines.
    pub fn stdout(capacity: usize) -> Self {
        Self::spawn("stdout", io::stdout(), capacity)
    }

    /// The standard error, with room for `capacity` lines.
    pub fn stderr(capacity: usize) -> Self {
        Self::spawn("stderr", io::stderr(), capacity)
    }

    /// Queues `line` and a newline, or drops it (counted) when the queue is full or the stream failed.
    pub fn line(&self, line: &str) {
        let mut bytes = Vec::with_capacity(line.len() + 1);
        bytes.extend_from_slice(line.as_bytes());
        bytes.push(b'\n');
        self.send(bytes);
    }

    fn send(&self, bytes: Vec<u8>) {
        if self.counts.failed.load(Ordering::Relaxed) {
            self.counts.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        match self.tx.try_send(bytes) {
            Ok(()) => {
                self.counts.queued.fetch_add(1, Ordering::Relaxed);
            }
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.counts.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Lines not written: dropped while the queue was full, or after the stream failed.
    pub fn lines_dropped(&self) -> u64 {
        self.counts.dropped.load(Ordering::Relaxed)
    }

    /// Whether a write to the stream failed (it is no longer written).
    pub fn failed(&self) -> bool {
        self.counts.failed.load(Ordering::Relaxed)
    }

    /// Waits up to `limit` for the lines queued so far to be written (before the process exits: its
    /// threads die with it). False when the stream is still behind after `limit`: a stalled reader does not
    /// hold the process past it.
    pub fn flush(&self, limit: Duration) -> bool {
        let queued = self.counts.queued.load(Ordering::Relaxed);
        let step = Duration::from_millis(5);
        let mut waited = Duration::ZERO;
        while self.counts.handled.load(Ordering::Acquire) < queued {
            if waited >= limit {
                return false;
            }
            std::thread::sleep(step);
            waited += step;
        }
        true
    }
}

/// Writes all of `bytes`, retrying what a non-blocking descriptor refuses for now; any other error ends it.
fn write_all(out: &mut impl Write, mut bytes: &[u8]) -> io::Result<()> {
    while !bytes.is_empty() {
        match out.write(bytes) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(10))
            }
            Err(e) => return Err(e),
        }
    }
    out.flush()
}

/// As a log writer: each formatted event (one `write_all` of the whole event) is one queued message.
impl Write for Console {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.send(buf.to_vec());
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Console {
    type Writer = Console;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// A reader that never reads: every write blocks until the test ends.
    struct Stalled(std::sync::mpsc::Receiver<()>);

    impl Write for Stalled {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            let _ = self.0.recv();
            Err(io::ErrorKind::BrokenPipe.into())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    /// A pipe whose reader left after `ok` writes (`node run | head -1`).
    struct Closed {
        ok: usize,
        got: Arc<Mutex<Vec<u8>>>,
    }

    impl Write for Closed {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            if self.ok == 0 {
                return Err(io::Error::from_raw_os_error(32)); // EPIPE
            }
            self.ok -= 1;
            self.got.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_stalled_stream_never_blocks_the_writer_and_drops_are_counted() {
        let (_release, rx) = std::sync::mpsc::channel();
        let c = Console::spawn("test", Stalled(rx), 8);
        // Were a line waited for, the first blocked write would hang this loop for ever.
        for i in 0..1000 {
            c.line(&format!("line {i}"));
        }
        // At most the queue and the line in the writer's hands got through.
        assert!(c.lines_dropped() >= 1000 - 9, "{}", c.lines_dropped());
        assert!(
            !c.flush(Duration::from_millis(20)),
            "a stalled stream does not hold the exit"
        );
    }

    #[test]
    fn a_closed_pipe_stops_the_stream_without_a_panic() {
        let got = Arc::new(Mutex::new(Vec::new()));
        let c = Console::spawn(
            "test",
            Closed {
                ok: 2,
                got: got.clone(),
            },
            64,
        );
        for i in 0..5 {
            c.line(&format!("{i}"));
        }
        assert!(c.flush(Duration::from_secs(10)));
        assert!(c.failed());
        c.line("after");
        assert_eq!(got.lock().unwrap().as_slice(), b"0\n1\n");
        assert_eq!(c.lines_dropped(), 4, "3 after the failure, 1 after the end");
    }

    #[test]
    fn lines_arrive_whole_and_in_order() {
        let got = Arc::new(Mutex::new(Vec::new()));
        let c = Console::spawn(
            "test",
            Closed {
                ok: usize::MAX,
                got: got.clone(),
            },
            4,
        );
        let mut want = String::new();
        for i in 0..3 {
            c.line(&format!("{{\"round\":{i}}}"));
            want.push_str(&format!("{{\"round\":{i}}}\n"));
        }
        assert!(c.flush(Duration::from_secs(10)));
        assert_eq!(
            String::from_utf8(got.lock().unwrap().clone()).unwrap(),
            want
        );
        assert_eq!(c.lines_dropped(), 0);
    }
}
