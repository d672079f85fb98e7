//! The runner's copy of its phase's log into the blob store
//! ([`terrace_crds::run::logs`]): everything the runner and the engine write to stdout
//! and stderr goes through a pipe; a reader thread relays it unchanged to the container's
//! own stdout (the Pod's log, as before) and hands it to a shipper thread, which cuts it
//! into parts of [`PART_BYTES`] and PUTs each to the API server as it fills, and the
//! part being written every [`FLUSH_EVERY`] while it grows, so readers follow the log
//! live. A part the API answers 413 to is past the log's cap (the API stored the cut
//! marker): shipping stops, relaying goes on. A part that cannot be stored (after three
//! tries for a server error, 401 or 409: the run's Pod not recorded yet) ends shipping
//! too, and [`Tee::finish`] says the log is not stored, so the operator archives the
//! Pod's log as before.

use std::io::{self, Read, Write};
use std::os::fd::OwnedFd;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use terrace_crds::run::logs::PART_BYTES;

/// How often the part being written is sent again while it grows.
pub const FLUSH_EVERY: Duration = Duration::from_secs(1);
/// After the phase, how long output still held open by leftover children (provider
/// plugins) is waited for.
const DRAIN: Duration = Duration::from_secs(5);
/// Tries per part before shipping gives up.
const TRIES: u32 = 3;

/// Where the parts go: `{url}/{n}` with `Authorization: Bearer {token}`.
#[derive(Clone, Debug)]
pub struct LogTarget {
    pub url: String,
    pub token: String,
}

enum Msg {
    Data(Vec<u8>),
    End,
}

/// A running copy of stdout and stderr; [`Tee::finish`] ends it.
pub struct Tee {
    out: OwnedFd,
    err: OwnedFd,
    reader_done: mpsc::Receiver<()>,
    control: mpsc::SyncSender<Msg>,
    shipper: JoinHandle<bool>,
}

/// Sends the parts of one log.
struct Shipper {
    agent: ureq::Agent,
    target: LogTarget,
    /// The part being written and its bytes so far.
    n: u64,
    part: Vec<u8>,
    /// The part has bytes not sent yet.
    dirty: bool,
    /// Shipping ended: `Some(true)` at the cap, `Some(false)` on a failure.
    stopped: Option<bool>,
}

impl Shipper {
    fn send(&mut self) {
        if self.stopped.is_some() || !self.dirty {
            return;
        }
        let url = format!("{}/{}", self.target.url, self.n);
        for attempt in 1..=TRIES {
            let resp = self
                .agent
                .put(&url)
                .header("Authorization", format!("Bearer {}", self.target.token))
                .header("Content-Type", "application/octet-stream")
                .send(&self.part[..]);
            match resp.map(|r| r.status().as_u16()) {
                Ok(s) if (200..300).contains(&s) => {
                    self.dirty = false;
                    return;
                }
                Ok(413) => {
                    self.stopped = Some(true);
                    return;
                }
                Ok(s) if s < 500 && !matches!(s, 401 | 409 | 429) => {
                    eprintln!(
                        "terrace runner: the API server refused part {} of the log: HTTP {s}; the log is kept in the Pod's log only",
                        self.n
                    );
                    self.stopped = Some(false);
                    return;
                }
                other => {
                    if attempt == TRIES {
                        eprintln!(
                            "terrace runner: storing part {} of the log failed ({other:?}); the log is kept in the Pod's log only",
                            self.n
                        );
                        self.stopped = Some(false);
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(500 * u64::from(attempt)));
                }
            }
        }
    }

    fn take(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            let room = PART_BYTES - self.part.len();
            let (now, rest) = data.split_at(room.min(data.len()));
            self.part.extend_from_slice(now);
            self.dirty = true;
            data = rest;
            if self.part.len() == PART_BYTES {
                self.send();
                self.n += 1;
                self.part.clear();
            }
        }
    }

    fn run(mut self, rx: &mpsc::Receiver<Msg>) -> bool {
        let mut last = Instant::now();
        loop {
            match rx.recv_timeout(FLUSH_EVERY) {
                Ok(Msg::Data(d)) => self.take(&d),
                Ok(Msg::End) | Err(mpsc::RecvTimeoutError::Disconnected) => break,
                Err(mpsc::RecvTimeoutError::Timeout) => {}
            }
            if last.elapsed() >= FLUSH_EVERY {
                self.send();
                last = Instant::now();
            }
        }
        self.send();
        self.stopped.unwrap_or(!self.dirty)
    }
}

/// Starts copying this process's stdout and stderr to `target` (and on to the original
/// stdout).
pub fn start(target: LogTarget) -> io::Result<Tee> {
    let (mut r, w) = io::pipe()?;
    let out = nix::unistd::dup(io::stdout()).map_err(io::Error::from)?;
    let err = nix::unistd::dup(io::stderr()).map_err(io::Error::from)?;
    io::stdout().flush()?;
    nix::unistd::dup2_stdout(&w).map_err(io::Error::from)?;
    nix::unistd::dup2_stderr(&w).map_err(io::Error::from)?;
    drop(w);
    let (tx, rx) = mpsc::sync_channel::<Msg>(256);
    let (done_tx, reader_done) = mpsc::channel();
    let mut relay = std::fs::File::from(out.try_clone()?);
    let data = tx.clone();
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 * 1024];
        let mut relay_ok = true;
        loop {
            match r.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    if relay_ok && relay.write_all(&buf[..n]).is_err() {
                        relay_ok = false;
                    }
                    if data.send(Msg::Data(buf[..n].to_vec())).is_err() {
                        // Shipping ended: keep relaying.
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        let _ = done_tx.send(());
    });
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(60)))
        .http_status_as_error(false)
        .build()
        .into();
    let shipper = Shipper {
        agent,
        target,
        n: 0,
        part: Vec::with_capacity(PART_BYTES),
        dirty: false,
        stopped: None,
    };
    let shipper = std::thread::spawn(move || shipper.run(&rx));
    Ok(Tee {
        out,
        err,
        reader_done,
        control: tx,
        shipper,
    })
}

impl Tee {
    /// Puts stdout and stderr back, waits (a little) for the last output, sends the last
    /// part and says whether the whole log is stored.
    pub fn finish(self) -> bool {
        let _ = io::stdout().flush();
        let _ = io::stderr().flush();
        let restored = nix::unistd::dup2_stdout(&self.out).is_ok()
            && nix::unistd::dup2_stderr(&self.err).is_ok();
        // Output still held open by a leftover child is waited for a moment only.
        let drained = restored && self.reader_done.recv_timeout(DRAIN).is_ok();
        let _ = self.control.send(Msg::End);
        drop(self.control);
        let stored = self.shipper.join().unwrap_or(false);
        stored && drained
    }
}
