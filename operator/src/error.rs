//! The operator layer's error type.

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("invalid object: {0}")]
    Invalid(String),
    #[error("serialization: {0}")]
    Json(#[from] serde_json::Error),
}

impl Error {
    /// A short label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Kube(_) => "kube",
            Error::Invalid(_) => "invalid",
            Error::Json(_) => "json",
        }
    }

    /// Whether retrying may help (a permanent error waits for a change of the object).
    pub fn is_transient(&self) -> bool {
        matches!(self, Error::Kube(_))
    }
}
