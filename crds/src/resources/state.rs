use crate::common::Condition;

crd_kind! {
    /// One version of a workspace's state (DESIGN.md §2). The state itself (which holds
    /// secrets) is never in this object: its bytes are in the blob store (compressed chunked
    /// Secrets owned by this object, by default); the object holds what identifies the
    /// version and a summary of its resources and outputs (names and types, no values).
    #[kube(
        kind = "StateVersion",
        doc = "A version of a workspace's state: serial, lineage and a summary; the bytes are in the blob store.",
        namespaced,
        status = "StateVersionStatus",
        shortname = "tfsv",
        printcolumn = r#"{"name":"Workspace","type":"string","jsonPath":".status.workspaceName","description":"The workspace's TFE name."}"#,
        printcolumn = r#"{"name":"Serial","type":"integer","jsonPath":".spec.serial"}"#,
        printcolumn = r#"{"name":"Resources","type":"integer","jsonPath":".status.resourceCount"}"#,
        printcolumn = r#"{"name":"Status","type":"string","jsonPath":".status.status"}"#
    )]
    columns: wide_id, age;
    pub struct StateVersionSpec {
        /// Name of the Workspace object (same namespace) whose state this is.
        #[schemars(length(min = 1))]
        pub workspace: String,
        /// The state's serial: greater than the one of the version before it (unless forced).
        pub serial: i64,
        /// The state's lineage: the same for every version of one state (unless forced).
        #[serde(default)]
        pub lineage: String,
        /// MD5 (hex) of the state file, as the client computed it.
        pub md5: String,
        /// Whether the serial and lineage rules were waived.
        #[serde(default)]
        pub force: bool,
        /// Who wrote it (`user:NAME`, `run:ID`).
        pub created_by: Option<String>,
        /// The run that wrote it, for remote runs.
        pub run: Option<String>,
    }
}

crd_struct! {
    /// Where one blob of a state version is.
    #[derive(Default, Eq)]
    pub struct StateBlob {
        /// Blob store key.
        pub key: String,
        /// Size in bytes.
        pub size: i64,
        /// SHA-256 (hex) of the bytes.
        pub sha256: String,
    }
}

crd_struct! {
    /// One resource of a state, summarized (no attribute values).
    #[derive(Default, Eq)]
    pub struct ResourceSummary {
        /// Resource name, e.g. `web`.
        pub name: String,
        /// Resource type, e.g. `terraform_data`.
        #[serde(rename = "type")]
        pub type_: String,
        /// Number of instances.
        pub count: i64,
        /// Module address (`root` for the root module).
        pub module: String,
        /// Provider address.
        pub provider: String,
    }
}

crd_struct! {
    /// One output of a state, summarized (never its value).
    #[derive(Default, Eq)]
    pub struct OutputSummary {
        /// The output's ID in this version (`wsout-…`).
        #[serde(default)]
        pub id: String,
        /// Output name.
        pub name: String,
        /// Whether the value is sensitive.
        #[serde(default)]
        pub sensitive: bool,
        /// The value's type in the configuration language's JSON form (e.g. `"string"`,
        /// `["list","number"]`), as JSON text.
        pub type_json: Option<String>,
    }
}

impl StateVersionStatus {
    /// The version's blobs in the blob store: its state, then its JSON state.
    pub fn blobs(&self) -> impl Iterator<Item = &StateBlob> {
        [self.state.as_ref(), self.json_state.as_ref()]
            .into_iter()
            .flatten()
    }
}

crd_struct! {
    /// Observed state of a state version.
    #[derive(Default)]
    pub struct StateVersionStatus {
        /// The version's ID (`sv-…`).
        pub id: Option<String>,
        /// Its workspace's TFE name (`spec.workspace` is the object's name): kubectl's
        /// WORKSPACE column, written with the ID.
        pub workspace_name: Option<String>,
        /// pending (its bytes not uploaded yet), finalized, discarded,
        /// backing_data_soft_deleted (its bytes hidden, restorable during a grace period:
        /// by the data retention policy or on request) or backing_data_permanently_deleted.
        #[schemars(extend("enum" = ["pending", "finalized", "discarded", "backing_data_soft_deleted", "backing_data_permanently_deleted"]))]
        pub status: Option<String>,
        /// The state file in the blob store.
        pub state: Option<StateBlob>,
        /// The JSON (`terraform show -json`) form of the state in the blob store.
        pub json_state: Option<StateBlob>,
        /// Engine version that wrote the state.
        pub terraform_version: Option<String>,
        /// Number of managed resource instances.
        #[serde(default)]
        pub resource_count: i64,
        /// The resources, summarized.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub resources: Vec<ResourceSummary>,
        /// The outputs, summarized (values are read from the blob, sensitive ones only by
        /// callers allowed to).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub outputs: Vec<OutputSummary>,
        /// Providers used, by address.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub providers: Vec<String>,
        /// Time the bytes arrived (RFC 3339).
        pub finalized_at: Option<String>,
        /// The order in which the workspace's versions became current (1, 2, …): the
        /// workspace's current state is its finalized version with the greatest.
        pub sequence: Option<i64>,
        /// Why the version was discarded, when it was.
        pub message: Option<String>,
        /// Time the bytes were soft-deleted (RFC 3339).
        pub backing_data_deleted_at: Option<String>,
        /// Time the bytes were deleted for good (RFC 3339).
        pub backing_data_permanently_deleted_at: Option<String>,
        /// kstatus conditions: Ready, Reconciling, Stalled.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub conditions: Vec<Condition>,
    }
}
