//! The operator layer's error type.

use std::time::Duration;

use kube::runtime::controller::Action;

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

    /// A controller error policy for a failed reconcile of object `name` by the `what`
    /// controller: logs the failure (with the metric label) and answers
    /// [`Error::retry_or_await_change`].
    pub fn log_and_retry(&self, what: &str, name: &str, delay: Duration) -> Action {
        self.log(what, name);
        self.retry_or_await_change(delay)
    }

    /// Logs a failed reconcile of object `name` by the `what` controller: a warning,
    /// except for an object deleted while its reconcile was queued (404), which is the
    /// ordinary end of an object's life (debug).
    pub fn log(&self, what: &str, name: &str) {
        if self.is_not_found() {
            tracing::debug!(error = %self, name = %name, "{what} reconcile: the object is gone");
        } else {
            tracing::warn!(
                error = %self,
                name = %name,
                label = self.metric_label(),
                "{what} reconcile failed"
            );
        }
    }

    /// Whether the Kubernetes API answered 404 Not Found.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Error::Kube(kube::Error::Api(s)) if s.code == 404)
    }

    /// A controller error policy's answer: retry after `delay` when retrying may help,
    /// else wait for a change of the object.
    pub fn retry_or_await_change(&self, delay: Duration) -> Action {
        if self.is_transient() {
            Action::requeue(delay)
        } else {
            Action::await_change()
        }
    }
}
