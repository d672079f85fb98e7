//! The custom resource kinds of DESIGN.md §2, group `terrace.dev`, version `v1alpha1`.
//! Doc comments become the CRD field descriptions (`kubectl explain`).

/// Declares the status struct of a kind whose controller tracks generations: the fields
/// given, then the two every such status ends with (`observedGeneration` and the kstatus
/// `conditions`), with the derives and camelCase names of every status. Doc comments
/// (including the struct's) become the CRD's field descriptions as on a hand-written
/// struct; the generated schema is the one the struct written out would give.
macro_rules! kind_status {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $(
                $(#[$field_meta:meta])*
                pub $field:ident: $ty:ty,
            )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
        #[serde(rename_all = "camelCase")]
        pub struct $name {
            $(
                $(#[$field_meta])*
                pub $field: $ty,
            )*
            /// Generation last acted on by the controller.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub observed_generation: Option<i64>,
            /// kstatus conditions: Ready, Reconciling, Stalled.
            #[serde(default, skip_serializing_if = "Vec::is_empty")]
            pub conditions: Vec<$crate::common::Condition>,
        }

        impl $crate::common::HasConditions for $name {
            fn conditions(&self) -> &[$crate::common::Condition] {
                &self.conditions
            }
        }
    };
}

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
