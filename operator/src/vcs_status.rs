//! Commit statuses (docs/vcs.md): a run of a configuration version fetched from a
//! repository reports its state on its commit through the connection's provider API (a
//! pull request's speculative plan shows as a check on the pull request). A small
//! controller over the catalog's Run feed: when the status the run's state means differs
//! from the one last reported (the run's [`ANNOTATION_VCS_STATUS`]), it sends it and
//! records it; a failed send is retried.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::api::DynamicObject;
use kube::runtime::controller::Action;
use kube::{Api, ResourceExt};
use terrace_crds::constants::{LABEL_ID, LABEL_ORGANIZATION};
use terrace_crds::ids::IdKind;
use terrace_crds::run::RunState;
use terrace_crds::vcs::{Forge, status};
use terrace_crds::{ConfigurationVersion, OAuthToken, Run};

use crate::catalog::{Catalog, CatalogStores, typed};
use crate::{Context, Error, Running, Shutdown};

/// Annotation on a run: the commit status last reported for it (`state: description`).
pub const ANNOTATION_VCS_STATUS: &str = "terrace.dev/vcs-status";

pub struct StatusContext {
    base: Arc<Context>,
    /// The catalog's caches: a run's configuration version and its connection are read
    /// there, not from the Kubernetes API.
    stores: CatalogStores,
    agent: ureq::Agent,
}

/// The controller, run until `shutdown` resolves (call before the catalog runs).
pub fn controller(
    ctx: Arc<Context>,
    catalog: &mut Catalog,
    shutdown: Shutdown,
) -> Result<Running, Error> {
    let stores = catalog.stores();
    let fed = catalog.controller(IdKind::Run)?;
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(10)))
        .http_status_as_error(false)
        .build()
        .into();
    let ctx = Arc::new(StatusContext {
        base: ctx,
        stores,
        agent,
    });
    Ok(crate::metrics::VCS_STATUS.running(fed.controller, shutdown, reconcile, ctx))
}

async fn reconcile(obj: Arc<DynamicObject>, ctx: Arc<StatusContext>) -> Result<Action, Error> {
    let Some(run) = typed::<Run>(&obj) else {
        return Ok(Action::await_change());
    };
    if run.spec.assessment || run.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let ns = run.namespace().unwrap_or_default();
    let Some(cv) = ctx
        .stores
        .get(
            IdKind::ConfigurationVersion,
            &ns,
            &run.spec.configuration_version,
        )
        .and_then(|o| typed::<ConfigurationVersion>(&o))
    else {
        return Ok(Action::await_change());
    };
    let Some(ia) = cv.spec.ingress_attributes.as_deref() else {
        return Ok(Action::await_change());
    };
    if ia.commit_sha.is_empty() || ia.oauth_token_id.is_empty() {
        return Ok(Action::await_change());
    }
    let st = run.status.clone().unwrap_or_default();
    let state: RunState = st
        .status
        .as_deref()
        .and_then(|s| s.parse().ok())
        .unwrap_or_default();
    let (commit_state, description) =
        status::of_run(state, run.spec.plan_only, st.plan.has_changes);
    let key = format!("{}: {description}", commit_state.as_str());
    if run.annotations().get(ANNOTATION_VCS_STATUS) == Some(&key) {
        return Ok(Action::await_change());
    }
    let Some(conn) = ctx
        .stores
        .in_namespace(IdKind::OAuthToken, &ns)
        .into_iter()
        .filter(|o| o.labels().get(LABEL_ID) == Some(&ia.oauth_token_id))
        .find_map(|o| typed::<OAuthToken>(&o))
    else {
        return Ok(Action::await_change());
    };
    let client = ctx.base.client.clone();
    let forge = Forge::of(&conn.spec.service_provider);
    let ws_name = st
        .workspace_name
        .clone()
        .unwrap_or_else(|| run.spec.workspace.clone());
    let org = run
        .labels()
        .get(LABEL_ORGANIZATION)
        .cloned()
        .unwrap_or_default();
    let run_id = run.labels().get(LABEL_ID).cloned().unwrap_or_default();
    let target = format!(
        "{}/app/{org}/{ws_name}/runs/{run_id}",
        ctx.base.settings.web_base()
    );
    let Some(req) = status::request(
        forge,
        conn.spec.api_url.as_deref().unwrap_or_default(),
        conn.spec.http_url.as_deref().unwrap_or_default(),
        &ia.identifier,
        &ia.commit_sha,
        commit_state,
        &description,
        &target,
        &format!("terrace/{org}/{ws_name}"),
    ) else {
        return Ok(Action::await_change());
    };
    let token = match conn.spec.token_secret_ref.as_ref() {
        Some(r) => Api::<Secret>::namespaced(client.clone(), &ns)
            .get_opt(&r.name)
            .await?
            .and_then(|s| s.data)
            .and_then(|d| d.get(&r.key).cloned())
            .map(|b| String::from_utf8_lossy(&b.0).into_owned()),
        None => None,
    };
    let agent = ctx.agent.clone();
    let sent = tokio::task::spawn_blocking(move || {
        let mut r = agent.post(&req.url).header("Accept", "application/json");
        if let Some(t) = &token {
            r = r.header(req.auth.0, format!("{}{t}", req.auth.1));
        }
        r.header("Content-Type", "application/json")
            .send(req.body.to_string())
            .map(|resp| resp.status().as_u16())
            .map_err(|e| e.to_string())
    })
    .await
    .map_err(|e| Error::Unavailable(e.to_string()))?;
    match sent {
        Ok(code) if (200..300).contains(&code) => {}
        Ok(code) => {
            return Err(Error::Unavailable(format!(
                "the provider answered the commit status with {code}"
            )));
        }
        Err(e) => {
            return Err(Error::Unavailable(format!(
                "sending the commit status: {e}"
            )));
        }
    }
    crate::annotate::annotate(&client, &run, ANNOTATION_VCS_STATUS, &key).await?;
    Ok(Action::await_change())
}
