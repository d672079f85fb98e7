//! terrace's custom resources (`terrace.dev/v1alpha1`) and the pure domain rules on them.
//!
//! Everything here is data and pure functions: the resource types (which generate the CRD
//! YAML), TFE-shaped IDs, the validation rules of SPEC.md shared by the API server and the
//! CRD schemas, and the constants (labels, annotations, condition types, field managers)
//! every other crate uses. No kube client, no axum, no tokio.
#![forbid(unsafe_code)]

#[macro_use]
mod macros;

pub mod archive;
pub mod assessment;
pub mod blobs;
pub mod common;
pub mod constants;
pub mod crdgen;
pub mod engine;
pub mod history;
pub mod ids;
pub mod lock;
pub mod namespaces;
pub mod notification;
pub mod policy;
pub mod registry;
pub mod resources;
pub mod rules;
pub mod run;
pub mod state;
pub mod testoutput;
pub mod testrun;
pub mod vcs;
pub mod watch;

pub use resources::*;
