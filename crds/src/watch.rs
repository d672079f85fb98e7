//! How every watch of terrace (the API server's index, the operator's controllers)
//! retries after an error: 410 Gone, the API server restarting or unreachable.

use std::time::Duration;

/// How a watch retries after an error (410 Gone, the API server restarting or
/// unreachable): at once, then 100 ms, doubling up to [`WatchBackoff::MAX`], and back to
/// "at once" after the next event. kube's default (800 ms doubling to 30 s) left the index
/// stale for up to half a minute after an API server came back, while writes answered 2xx
/// and reads answered 404; the operator's controllers, with the same default, took 20-30 s
/// to see an object applied after a restart (issue 25).
#[derive(Clone, Debug, Default)]
pub struct WatchBackoff {
    attempt: u32,
}

impl WatchBackoff {
    /// The longest pause between two attempts.
    pub const MAX: Duration = Duration::from_secs(1);
}

impl Iterator for WatchBackoff {
    type Item = Duration;
    fn next(&mut self) -> Option<Duration> {
        let delay = match self.attempt {
            0 => Duration::ZERO,
            n => Duration::from_millis(100u64 << (n - 1).min(4)).min(Self::MAX),
        };
        self.attempt = self.attempt.saturating_add(1);
        Some(delay)
    }
}

impl kube::runtime::utils::Backoff for WatchBackoff {
    fn reset(&mut self) {
        self.attempt = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::WatchBackoff;
    use std::time::Duration;

    #[test]
    fn a_watch_retries_at_once_then_within_a_second() {
        let delays: Vec<Duration> = WatchBackoff::default().take(8).collect();
        assert_eq!(delays[0], Duration::ZERO);
        assert_eq!(delays[1], Duration::from_millis(100));
        assert!(delays.iter().all(|d| *d <= WatchBackoff::MAX), "{delays:?}");
        let mut b = WatchBackoff::default();
        b.nth(5);
        kube::runtime::utils::Backoff::reset(&mut b);
        assert_eq!(b.next(), Some(Duration::ZERO));
    }
}
