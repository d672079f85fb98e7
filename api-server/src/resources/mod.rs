//! The resources of the API, one module (or folder, for a resource with sub-resources)
//! each, every one with its own `router()`. They stand on the layer ([`crate::prelude`])
//! and never import each other; what two of them show alike lives in
//! [`crate::documents`].

pub mod agent_pools;
pub mod module_tests;
pub mod oauth_tokens;
pub mod organizations;
pub mod projects;
pub mod retention;
pub mod runs;
pub mod ssh_keys;
pub mod state_versions;
pub mod tag_bindings;
pub mod tags;
pub mod workspace_vars;
pub mod workspaces;

use axum::Router;

use crate::AppState;

/// Every resource's routes (behind the global body limit).
pub fn router() -> Router<AppState> {
    Router::new()
        .merge(organizations::router())
        .merge(projects::router())
        .merge(workspaces::router())
        .merge(tags::router())
        .merge(tag_bindings::router())
        .merge(ssh_keys::router())
        .merge(retention::router())
        .merge(agent_pools::router())
        .merge(oauth_tokens::router())
        .merge(module_tests::router())
        .merge(state_versions::router())
        .merge(runs::router())
        .merge(workspace_vars::router())
}

/// Routes with their own, larger body limit (uploads), merged outside the global one.
pub fn upload_router(settings: &crate::Settings) -> Router<AppState> {
    module_tests::upload_router()
        .merge(state_versions::upload_router(settings.max_state_bytes))
        .merge(runs::runner::upload_router())
}
