//! The resources of the API, one module (or folder, for a resource with sub-resources)
//! each, every one with its own `router()`. They stand on the layer ([`crate::prelude`])
//! and never import each other (but for module tests, which run against the registry's
//! modules and locate them through [`registry`]); what two of them show alike lives in
//! [`crate::documents`].

pub mod agent_pools;
pub mod module_tests;
pub mod notifications;
pub mod oauth_clients;
pub mod organizations;
pub mod policies;
pub mod projects;
pub mod registry;
pub mod retention;
pub mod runs;
pub mod ssh_keys;
pub mod state_versions;
pub mod tag_bindings;
pub mod tags;
pub mod varsets;
pub mod workspace_vars;
pub mod workspaces;

use axum::Router;

use crate::AppState;

/// Every resource's routes (behind the global body limit).
pub fn router() -> Router<AppState> {
    merged_routers![
        organizations,
        projects,
        workspaces,
        tags,
        tag_bindings,
        ssh_keys,
        retention,
        agent_pools,
        oauth_clients,
        registry,
        module_tests,
        state_versions,
        runs,
        workspace_vars,
        varsets,
        notifications,
        policies
    ]
}

/// Routes with their own, larger body limit (uploads), merged outside the global one.
pub fn upload_router(settings: &crate::Settings) -> Router<AppState> {
    module_tests::upload_router()
        .merge(state_versions::upload_router(settings.max_state_bytes))
        .merge(runs::runner::upload_router())
}
