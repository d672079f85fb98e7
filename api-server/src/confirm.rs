//! Read-your-writes across API server replicas (issue 25, finding 8). Each replica serves
//! from its own watch-fed index, so an object created through one replica can be missing
//! from another's index for the moment its watch takes to deliver it. A miss is therefore
//! never answered 404 at once: the cluster is asked whether the object exists, and if it
//! does, the read waits (bounded by [`write::INDEX_WAIT`]) until the index holds it.
//!
//! The question costs requests to the Kubernetes API server on a miss only, never on a
//! hit: a metadata-only LIST by the `terrace.dev/id` label, a GET of a workspace's name
//! claim first for a read by name, and a LIST of the (few) organizations for an
//! organization. The LISTs are served from kube-apiserver's watch cache
//! (`resourceVersion=0`), so a miss reads nothing from etcd however many objects the
//! cluster holds: a consistent LIST by label reads every object of the kind from etcd
//! (measured on kube-apiserver v1.36: 2,441 objects per miss with 2,441 workspaces,
//! `apiserver_storage_list_fetched_objects_total`; 0 from the cache). The cache is the
//! one the writing replica's watch was fed from, so it holds what that replica answered
//! 2xx for; with several kube-apiservers it may lag one by moments. A value that cannot
//! be an ID (not a valid label value) is a 404 without asking.

use kube::api::{ListParams, ObjectMeta};
use kube::{Api, ResourceExt};
use terrace_crds::constants::LABEL_ID;
use terrace_crds::{Organization, Workspace};

use crate::AppState;
use crate::index::Indexed;
use crate::write;

/// Whether `id` is a valid label value, so a label selector on it is well formed.
fn label_value(id: &str) -> bool {
    let bytes = id.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes.first().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.last().is_some_and(u8::is_ascii_alphanumeric)
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(b))
}

/// The metadata of the object of kind `K` labelled with `id`, if the cluster holds one.
async fn labelled<K: Indexed>(state: &AppState, id: &str) -> Option<ObjectMeta> {
    if !label_value(id) {
        return None;
    }
    let api: Api<K> = Api::all(state.client.clone());
    let params = ListParams::default()
        .labels(&format!("{LABEL_ID}={id}"))
        .match_any();
    match api.list_metadata(&params).await {
        Ok(list) => list.items.into_iter().next().map(|o| o.metadata),
        Err(e) => {
            tracing::debug!(kind = K::NAME, id, error = %e, "confirming an index miss failed");
            None
        }
    }
}

/// After the index missed the object of kind `K` with ID `id`: whether the cluster holds
/// it, and the index has caught up with it (then a second lookup finds it).
pub async fn by_id<K: Indexed>(state: &AppState, id: &str) -> bool {
    match labelled::<K>(state, id).await {
        Some(meta) => write::wait_seen_meta::<K>(state, &meta).await,
        None => false,
    }
}

/// After the index missed workspace `name` of the organization in namespace `ns`:
/// whether the cluster holds it (its name claim names its ID), and the index has caught
/// up with it.
pub async fn workspace_by_name(state: &AppState, ns: &str, name: &str) -> bool {
    use k8s_openapi::api::core::v1::ConfigMap;
    use terrace_crds::resources::{CLAIM_WORKSPACE_ID, name_claim};
    let claims: Api<ConfigMap> = Api::namespaced(state.client.clone(), ns);
    let Ok(Some(claim)) = claims.get_opt(&name_claim(name)).await else {
        return false;
    };
    match claim.data.as_ref().and_then(|d| d.get(CLAIM_WORKSPACE_ID)) {
        Some(id) => by_id::<Workspace>(state, id).await,
        None => false,
    }
}

/// After the index missed organization `name` (its TFE name): whether the cluster holds
/// it, and the index has caught up with it.
pub async fn organization(state: &AppState, name: &str) -> bool {
    let api: Api<Organization> = Api::all(state.client.clone());
    let Ok(orgs) = api.list(&ListParams::default().match_any()).await else {
        return false;
    };
    match orgs.items.iter().find(|o| o.tfe_name() == name) {
        Some(org) => {
            tracing::debug!(org = %org.name_any(), "an organization missing from the index");
            write::wait_seen_meta::<Organization>(state, &org.metadata).await
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::label_value;
    use crate::testing::{call_on, harness};
    use std::time::Duration;

    /// A replica whose watch has not delivered an object yet does not answer 404 for it:
    /// reads by ID, by organization and name, and of the organization wait until its
    /// index holds the object; a workspace that does not exist is still 404 at once.
    #[tokio::test]
    async fn a_replica_behind_its_watch_reads_what_another_wrote() {
        let h = harness(crate::Edition::SelfHosted).await;
        let (st, doc) = h
            .call(
                "POST",
                "/api/v2/organizations/acme/workspaces",
                Some(serde_json::json!({"data": {"type": "workspaces", "attributes": {"name": "made-elsewhere"}}})),
            )
            .await;
        assert_eq!(st, 201, "{doc}");
        let id = doc["data"]["id"].as_str().unwrap_or_default().to_owned();
        let behind = h.replica_not_watching().await;
        let reads = [
            format!("/api/v2/workspaces/{id}"),
            "/api/v2/organizations/acme/workspaces/made-elsewhere".to_owned(),
            "/api/v2/organizations/acme".to_owned(),
        ];
        let pending: Vec<_> = reads
            .iter()
            .map(|path| {
                let (state, token, path) = (behind.clone(), h.token.clone(), path.clone());
                tokio::spawn(async move { call_on(&state, &token, "GET", &path, None).await })
            })
            .collect();
        // The reads are waiting when the replica's watches start.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let tasks = behind.index.spawn_watches(behind.client.clone());
        for (path, read) in reads.iter().zip(pending) {
            let (st, doc) = read.await.unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(st, 200, "{path}: {doc}");
        }
        let started = std::time::Instant::now();
        let (st, _) = call_on(
            &behind,
            &h.token,
            "GET",
            "/api/v2/workspaces/ws-NoSuch0000000001",
            None,
        )
        .await;
        assert_eq!(st, 404);
        let (st, _) = call_on(
            &behind,
            &h.token,
            "GET",
            "/api/v2/organizations/acme/workspaces/nosuch",
            None,
        )
        .await;
        assert_eq!(st, 404);
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "a real 404 does not wait for the index"
        );
        for t in tasks {
            t.abort();
        }
    }

    #[test]
    fn only_label_values_are_asked_about() {
        assert!(label_value("ws-AbC123"));
        assert!(label_value("sv-1.2_3"));
        assert!(!label_value(""));
        assert!(!label_value("ws 1"));
        assert!(!label_value("-ws"));
        assert!(!label_value("ws,x=y"));
        assert!(!label_value(&"a".repeat(64)));
    }
}
