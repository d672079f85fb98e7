//! The operator's integration tests in one binary, linked once (issue 43: nine binaries
//! that each linked the operator and the cluster simulator took minutes of CI to build).
//! Each file of this folder is a module and keeps its own name, so a test is
//! `FILE::NAME`: `cargo test -p terrace-operator --test integration runs::` runs one
//! file's tests. cargo-nextest still runs each test in a process of its own.

mod common;

mod automatic;
mod conditions;
mod controllers;
mod guarded;
mod leader;
mod namespaces;
mod retention;
mod runner;
mod runs;
mod testrun;
