//! The `terrace` binary's own commands as a shell uses them.

use std::io::Read;
use std::process::{Command, Stdio};

use terrace_tests::terrace_bin;

/// `terrace crds | head -1`: a reader that stops early ends the command quietly (exit
/// 0, nothing on stderr), as CLIs do, instead of a "Broken pipe" panic.
#[test]
fn crds_into_a_closed_pipe_exits_quietly() {
    let mut child = Command::new(terrace_bin())
        .arg("crds")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("terrace crds");
    let mut first = [0u8; 4];
    child
        .stdout
        .as_mut()
        .expect("stdout")
        .read_exact(&mut first)
        .expect("the first bytes");
    assert_eq!(&first, b"---\n");
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("terrace crds ends");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{:?}: {stderr}", out.status);
    assert!(stderr.is_empty(), "{stderr}");
}
