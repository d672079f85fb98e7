//! Where the logs of plans, applies and test runs live (docs/runs.md, "Logs"): in the
//! blob store, whole, in parts of [`PART_BYTES`] bytes of the log (each stored
//! compressed). The runner in the phase's Pod copies everything the phase prints into
//! parts as it goes and sends the part being written again as it grows, so a reader
//! sees the log live; the API server serves byte windows of a log by reading only the
//! parts they touch. A phase whose log passed the API server's cap ends with the
//! [`cut_marker`] line instead of its rest: never silently.
//!
//! The parts of Pod `pod`'s log are keys [`part_key`]`(pod, 0..)`; the first part missing
//! ends the log. Logs archived before (a ConfigMap `<pod>-log` of the gzip-compressed log)
//! still read, and `terrace blobs migrate` moves them into parts.

/// Bytes of the log in each part but the last.
pub const PART_BYTES: usize = 1024 * 1024;

/// The default cap on a log's bytes (`--max-log-bytes`).
pub const DEFAULT_MAX_LOG_BYTES: u64 = 1024 * 1024 * 1024;

/// Blob key of part `n` of the log of Pod `pod` (in the Pod's namespace).
pub fn part_key(pod: &str, n: u64) -> String {
    format!("logs/{pod}/{n:06}")
}

/// The part of the log byte `offset` is in, and where in that part.
pub fn part_of(offset: u64) -> (u64, usize) {
    let size = PART_BYTES as u64;
    (offset / size, usize::try_from(offset % size).unwrap_or(0))
}

/// The parts (`[first, last)`) a log of `cap` bytes may have, and whether part `n` is
/// past the cap.
pub fn past_cap(n: u64, cap: u64) -> bool {
    n.saturating_mul(PART_BYTES as u64) >= cap
}

/// The line that ends a log cut at the cap of `cap` bytes.
pub fn cut_marker(cap: u64) -> String {
    format!(
        "\nterrace: the rest of this log was not kept: it passed the limit of {cap} bytes (the API server's --max-log-bytes)\n"
    )
}

/// The line terrace adds after the log of a phase that errored, saying why.
pub fn cause_line(cause: &str) -> String {
    format!("terrace: {cause}\n")
}

/// Cuts `log` into parts of [`PART_BYTES`] (a last shorter one; none when empty).
pub fn parts(log: &[u8]) -> impl Iterator<Item = &[u8]> {
    log.chunks(PART_BYTES)
}

/// The text of gzip data `gz`, at most `limit` bytes of it; `None` when it is not gzip.
pub fn gunzip(gz: &[u8], limit: u64) -> Option<Vec<u8>> {
    use std::io::Read;
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(gz)
        .take(limit)
        .read_to_end(&mut out)
        .ok()?;
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_and_offsets() {
        assert_eq!(part_key("r1-plan", 3), "logs/r1-plan/000003");
        assert_eq!(part_of(0), (0, 0));
        assert_eq!(part_of(PART_BYTES as u64 + 5), (1, 5));
        let log = vec![b'x'; PART_BYTES * 2 + 1];
        let cut: Vec<usize> = parts(&log).map(<[u8]>::len).collect();
        assert_eq!(cut, vec![PART_BYTES, PART_BYTES, 1]);
        assert_eq!(parts(&[]).count(), 0);
        assert!(!past_cap(0, 1));
        assert!(past_cap(1, PART_BYTES as u64));
        assert!(!past_cap(1, PART_BYTES as u64 + 1));
        assert!(cut_marker(10).contains("limit of 10 bytes"));
    }
}
