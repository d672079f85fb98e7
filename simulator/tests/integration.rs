//! The simulator's tests in one binary, linked once (issue 43: a binary per file each
//! linked the simulator and kube's clients). Each file of this folder is a module and keeps
//! its own name: `cargo test -p terrace-simulator --test integration api::` runs one
//! file's tests.

mod api;
mod clients;
mod durability;
mod listener;
mod openapi_kubectl;
mod pods;
mod rbac;
mod tls_protobuf;
