//! JSON:API conventions shared by every resource: the media type and error documents.

use serde::Serialize;

/// The JSON:API media type TFE answers with.
pub const MEDIA_TYPE: &str = "application/vnd.api+json";

/// One JSON:API error object.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct ErrorObject {
    pub status: String,
    pub title: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<ErrorSource>,
}

/// Where in the request the error is (`/data/attributes/name`) or which query parameter.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct ErrorSource {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pointer: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parameter: Option<String>,
}

/// `{"errors": [...]}`.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct ErrorDocument {
    pub errors: Vec<ErrorObject>,
}
