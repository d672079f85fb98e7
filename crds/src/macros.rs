//! The declarations every schema type of the CRDs shares, written once: the derives and
//! camelCase names of a schema struct, the serde rule of its optional fields, the group of
//! a kind and the two fields every status ends with. The generated schema is the one the
//! structs written out by hand would give (the CRD test under `crdgen` compares it with
//! the committed YAML).

/// Declares a struct of a CRD schema: derives `Clone`, `Debug`, `PartialEq`, `Serialize`,
/// `Deserialize` and `JsonSchema` (add others, such as `Default` or `Eq`, with a `derive`
/// attribute), names the fields in camelCase, and leaves every `Option` field out of the
/// object while it is `None` (`#[serde(default, skip_serializing_if = "Option::is_none")]`,
/// so it is never required either). Other fields keep the serde attributes they are given.
/// Doc comments become the CRD's field descriptions as on a plain struct. Every field is
/// `pub`. `@variable_value;` in the field list stands for the three fields every variable
/// kind has, at that place: `value`, `valueFrom` and `description`.
macro_rules! crd_struct {
    (
        $(#[$meta:meta])*
        pub struct $name:ident { $($fields:tt)* }
    ) => {
        crd_struct!(@field [$(#[$meta])*] $name [] $($fields)*);
    };
    // The value fields of a variable kind (TestVariable, WorkspaceVariable).
    (
        @field $metas:tt $name:ident [$($done:tt)*]
        @variable_value;
        $($rest:tt)*
    ) => {
        crd_struct!(@field $metas $name [$($done)*]
            /// The value (non-sensitive variables only).
            #[serde(default)]
            pub value: String,
            /// The value from a Secret key (sensitive variables).
            pub value_from: Option<$crate::common::SecretKeyRef>,
            /// Description of the variable (at most 512 characters).
            #[schemars(length(max = 512))]
            pub description: Option<String>,
            $($rest)*
        );
    };
    // An optional field: absent from the object while None.
    (
        @field $metas:tt $name:ident [$($done:tt)*]
        $(#[$field_meta:meta])*
        pub $field:ident: Option<$ty:ty>,
        $($rest:tt)*
    ) => {
        crd_struct!(@field $metas $name [
            $($done)*
            $(#[$field_meta])*
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub $field: Option<$ty>,
        ] $($rest)*);
    };
    // Any other field, as written.
    (
        @field $metas:tt $name:ident [$($done:tt)*]
        $(#[$field_meta:meta])*
        pub $field:ident: $ty:ty,
        $($rest:tt)*
    ) => {
        crd_struct!(@field $metas $name [
            $($done)*
            $(#[$field_meta])*
            pub $field: $ty,
        ] $($rest)*);
    };
    (@field [$(#[$meta:meta])*] $name:ident [$($done:tt)*]) => {
        #[derive(
            Clone,
            Debug,
            PartialEq,
            ::serde::Serialize,
            ::serde::Deserialize,
            ::schemars::JsonSchema,
        )]
        $(#[$meta])*
        #[serde(rename_all = "camelCase")]
        pub struct $name {
            $($done)*
        }
    };
}

/// Declares the spec struct of a custom resource kind as [`crd_struct!`] does, deriving
/// `CustomResource` (and `Default`) in terrace's API group `terrace.dev/v1alpha1` and
/// category `terrace`. The `#[kube(...)]` attributes given say the rest: kind, doc,
/// `namespaced` (all kinds but Organization), status, short name and the kind's own
/// printer columns. The plural is the one kube infers from the kind (lower case, `s`).
///
/// `columns:` (after the `#[kube(...)]` attribute) then names the standard printer
/// columns that follow the kind's own, in order: `tfe_name` (`spec.name`), `id` (the TFE
/// ID, the `terrace.dev/id` label), `wide_id` (the same, shown with `-o wide` only) and
/// `age`.
macro_rules! crd_kind {
    (
        $(#[$meta:meta])*
        columns: $($column:ident),+;
        $(#[$more_meta:meta])*
        pub struct $name:ident { $($fields:tt)* }
    ) => {
        crd_kind!(@column [$(#[$meta])* $(#[$more_meta])*] [$($column)+] $name { $($fields)* });
    };
    (@column [$($metas:tt)*] [tfe_name $($rest:ident)*] $($spec:tt)*) => {
        crd_kind!(@column [
            $($metas)*
            #[kube(printcolumn = r#"{"name":"TFE Name","type":"string","jsonPath":".spec.name"}"#)]
        ] [$($rest)*] $($spec)*);
    };
    (@column [$($metas:tt)*] [id $($rest:ident)*] $($spec:tt)*) => {
        crd_kind!(@column [
            $($metas)*
            #[kube(printcolumn = r#"{"name":"ID","type":"string","jsonPath":".metadata.labels.terrace\\.dev/id"}"#)]
        ] [$($rest)*] $($spec)*);
    };
    (@column [$($metas:tt)*] [wide_id $($rest:ident)*] $($spec:tt)*) => {
        crd_kind!(@column [
            $($metas)*
            #[kube(printcolumn = r#"{"name":"ID","type":"string","jsonPath":".metadata.labels.terrace\\.dev/id","priority":1}"#)]
        ] [$($rest)*] $($spec)*);
    };
    (@column [$($metas:tt)*] [age $($rest:ident)*] $($spec:tt)*) => {
        crd_kind!(@column [
            $($metas)*
            #[kube(printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#)]
        ] [$($rest)*] $($spec)*);
    };
    (@column [$($metas:tt)*] [] $name:ident { $($fields:tt)* }) => {
        crd_struct! {
            #[derive(::kube::CustomResource, Default)]
            #[kube(group = "terrace.dev", version = "v1alpha1", category = "terrace")]
            $($metas)*
            pub struct $name { $($fields)* }
        }
    };
}

/// Declares the status struct of a kind whose controller tracks generations, as
/// [`crd_struct!`] does (with `Default`): the fields given, then the two every such status
/// ends with (`observedGeneration` and the kstatus `conditions`), and its
/// [`HasConditions`](crate::common::HasConditions).
macro_rules! kind_status {
    (
        $(#[$meta:meta])*
        pub struct $name:ident { $($fields:tt)* }
    ) => {
        crd_struct! {
            $(#[$meta])*
            #[derive(Default)]
            pub struct $name {
                $($fields)*
                /// Generation last acted on by the controller.
                pub observed_generation: Option<i64>,
                /// kstatus conditions: Ready, Reconciling, Stalled.
                #[serde(default, skip_serializing_if = "Vec::is_empty")]
                pub conditions: Vec<$crate::common::Condition>,
            }
        }

        impl $crate::common::HasConditions for $name {
            fn conditions(&self) -> &[$crate::common::Condition] {
                &self.conditions
            }
        }
    };
}
