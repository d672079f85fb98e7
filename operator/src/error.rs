//! The operator layer's error type.

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("invalid object: {0}")]
    Invalid(String),
    #[error("serialization: {0}")]
    Json(#[from] serde_json::Error),
    /// A write kept losing optimistic-concurrency races (409 Conflict).
    #[error("conflict: {0}")]
    Conflict(String),
    /// Something the reconcile depends on (a cache) is not available yet.
    #[error("unavailable: {0}")]
    Unavailable(String),
}

impl Error {
    /// A short label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Kube(_) => "kube",
            Error::Invalid(_) => "invalid",
            Error::Json(_) => "json",
            Error::Conflict(_) => "conflict",
            Error::Unavailable(_) => "unavailable",
        }
    }

    /// Whether retrying may help (a permanent error waits for a change of the object).
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            Error::Kube(_) | Error::Conflict(_) | Error::Unavailable(_)
        )
    }
}
