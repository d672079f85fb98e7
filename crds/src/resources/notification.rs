//! Notification configurations (TFE's notification-configurations): where a workspace's
//! run events are sent. The operator delivers them (see `crate::notification` for the
//! payloads, the signature and the destination rules).

use crate::common::SecretKeyRef;

crd_kind! {
    /// A destination for the run notifications of a workspace (or of every workspace of a
    /// project): a generic webhook (TFE's JSON
    /// payload, signed with HMAC-SHA512 when a token is set), Slack or Microsoft Teams.
    #[kube(
        kind = "NotificationConfiguration",
        doc = "A destination for a workspace's run notifications.",
        namespaced,
        status = "NotificationConfigurationStatus",
        shortname = "tfnotify",
        printcolumn = r#"{"name":"Workspace","type":"string","jsonPath":".spec.workspace"}"#,
        printcolumn = r#"{"name":"Type","type":"string","jsonPath":".spec.destinationType"}"#,
        printcolumn = r#"{"name":"Enabled","type":"boolean","jsonPath":".spec.enabled"}"#
    )]
    columns: tfe_name, id, age;
    #[schemars(extend("x-kubernetes-validations" = [
        {"rule": "has(self.workspace) != has(self.project)",
         "message": "exactly one of workspace or project must be given"}
    ]))]
    pub struct NotificationConfigurationSpec {
        /// The configuration's name.
        #[schemars(length(min = 1, max = 255))]
        pub name: String,
        /// The workspace whose runs are notified (its ID `ws-…` or its TFE name).
        #[serde(default, skip_serializing_if = "String::is_empty")]
        #[schemars(length(min = 1))]
        pub workspace: String,
        /// Or the project whose workspaces' runs are all notified (its ID `prj-…` or its
        /// name; TFE's project notification configurations).
        pub project: Option<String>,
        /// `generic`, `slack` or `microsoft-teams` (email has no mail server here).
        #[schemars(extend("enum" = ["generic", "slack", "microsoft-teams"]))]
        pub destination_type: String,
        /// Notifications are sent only while enabled.
        #[serde(default)]
        pub enabled: bool,
        /// The destination (http or https; which hosts the operator may reach is its
        /// `--notification-allowed-cidrs`, see docs/notifications.md).
        #[schemars(length(min = 1, max = 2048))]
        pub url: String,
        /// The token a `generic` destination's payloads are signed with
        /// (`X-TFE-Notification-Signature`, HMAC-SHA512); it never leaves the Secret.
        pub token_from: Option<SecretKeyRef>,
        /// TFE's trigger names: `run:created`, `run:planning`, `run:needs_attention`,
        /// `run:applying`, `run:completed`, `run:errored` (and the `assessment:*` and
        /// `workspace:*` ones, accepted; terrace has no assessments).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        #[schemars(extend("items" = {"type": "string", "enum": crate::notification::TRIGGERS}))]
        pub triggers: Vec<String>,
    }
}

crd_struct! {
    /// One delivery to the destination, as TFE shows it (`delivery-responses`).
    #[derive(Default)]
    pub struct DeliveryResponse {
        /// Where it was sent.
        pub url: String,
        /// The HTTP status code (empty when no response came).
        #[serde(default)]
        pub code: String,
        /// The start of the response body, or why nothing was sent or received.
        #[serde(default)]
        pub body: String,
        /// The response's headers.
        #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
        pub headers: std::collections::BTreeMap<String, Vec<String>>,
        /// When it was sent (RFC 3339).
        pub sent_at: String,
        /// Whether the destination answered 2xx.
        pub successful: bool,
        /// What was delivered: `run-…/run:completed`, or `verification`.
        pub notification: String,
        /// The attempt (1 for the first).
        #[serde(default)]
        // Kubernetes knows int32 and int64, not uint32 (Helm warned at every install).
        #[schemars(with = "i64")]
        pub attempt: u32,
    }
}

crd_struct! {
    /// A notification done with: delivered, or given up on after the last retry.
    pub struct DeliveredNotification {
        /// The run's ID.
        pub run: String,
        /// The trigger (`run:completed`).
        pub trigger: String,
        /// When the run reached it (RFC 3339): entries older than the delivery window are
        /// forgotten, as such notifications are no longer sent.
        pub at: String,
    }
}

kind_status! {
    /// Observed state of a notification configuration: the operator's deliveries.
    pub struct NotificationConfigurationStatus {
        /// The configuration's ID (`nc-…`).
        pub id: Option<String>,
        /// The latest deliveries, newest first (at most ten).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub delivery_responses: Vec<DeliveryResponse>,
        /// The notifications of the delivery window done with (each run and trigger once).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub delivered: Vec<DeliveredNotification>,
        /// Since when the configuration is enabled (RFC 3339; absent while disabled): runs
        /// notify from then on, so enabling one does not report what happened while it
        /// was off.
        pub enabled_since: Option<String>,
        /// The last verification request answered (the value of the
        /// `terrace.dev/verify-requested` annotation).
        pub verified: Option<String>,
    }
}
