//! What every resource module imports: the layer's extractors, errors, rendering and
//! writes, so a new resource starts with `use crate::prelude::*;` instead of a preamble.

pub use std::sync::Arc;

pub use axum::Router;
pub use axum::extract::{Path, State};
pub use axum::http::StatusCode;
pub use axum::response::{IntoResponse, Response};
pub use axum::routing::{delete, get, patch, post, put};
pub use kube::{Resource, ResourceExt};
pub use serde::Deserialize;
pub use serde_json::{Value, json};
pub use terrace_crds::Organization;

pub use crate::access::{Admin, AdminOr404, Deny, Found, Located, Read, VisibleOrg};
pub use crate::auth::{Caller, Check};
pub use crate::body::{Attr, Document, JsonApi, Nullable, ToMany, ToOne, Typed, nullable};
pub use crate::caller::Authed;
pub use crate::error::{ApiError, FieldError};
pub use crate::listing::{Listing, Shown};
pub use crate::query::QueryParams;
pub use crate::render::{
    Doc, Included, created_at, id_of, list, list_rendered, no_content, timestamp,
};
pub use crate::{AppState, write};
