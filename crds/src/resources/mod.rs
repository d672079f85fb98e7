//! The custom resource kinds of DESIGN.md §2, group `terrace.dev`, version `v1alpha1`.
//! Doc comments become the CRD field descriptions (`kubectl explain`).

mod module;
mod organization;
mod project;
mod references;
mod run;
mod state;
mod variable;
mod workspace;

pub use module::*;
pub use organization::*;
pub use project::*;
pub use references::*;
pub use run::*;
pub use state::*;
pub use variable::*;
pub use workspace::*;

pub(crate) fn default_true() -> bool {
    true
}
