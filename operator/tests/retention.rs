//! Data retention of state versions (issue 14, SPEC B20–B22), against the cluster
//! simulator: the data of a finalized version older than the policy is soft-deleted (the
//! version marked `backing_data_soft_deleted`, its chunk Secrets kept for the grace
//! period), never the current state's; soft-deleted data older than the grace period is
//! deleted for good (chunks deleted, `backing_data_permanently_deleted`); a policy set
//! later reaches versions already stored; `dont-delete` and no policy keep everything.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::jiff;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use terrace_crds::common::DataRetentionPolicy;
use terrace_crds::constants::LABEL_ID;
use terrace_crds::{StateBlob, StateVersion, StateVersionSpec, Workspace, WorkspaceSpec};

use crate::common::{self, E, R, eventually};

const NS: &str = "keepers";

/// A finalized version of workspace `ws` written `days_ago`, with its state blob's two
/// chunk Secrets (as the API server stores them).
async fn version(client: &Client, ws: &str, id: &str, serial: i64, days_ago: i64) -> R {
    let api: Api<StateVersion> = Api::namespaced(client.clone(), NS);
    let name = id.to_ascii_lowercase();
    api.create(
        &PostParams::default(),
        &StateVersion {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: Some(BTreeMap::from([(LABEL_ID.to_owned(), id.to_owned())])),
                ..Default::default()
            },
            spec: StateVersionSpec {
                workspace: ws.into(),
                serial,
                lineage: "l".into(),
                md5: "x".into(),
                ..Default::default()
            },
            status: None,
        },
    )
    .await?;
    let key = terrace_crds::blobs::state_key(id);
    let written = jiff::Timestamp::now()
        .checked_sub(jiff::SignedDuration::from_hours(24 * days_ago))?
        .to_string();
    api.patch_status(
        &name,
        &PatchParams::default(),
        &Patch::Merge(&serde_json::json!({"status": {
            "id": id, "status": "finalized", "finalizedAt": written,
            "state": StateBlob {key: key.clone(), size: 10, sha256: "x".into()},
        }})),
    )
    .await?;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NS);
    for i in 0..2 {
        secrets
            .create(
                &PostParams::default(),
                &Secret {
                    metadata: ObjectMeta {
                        name: Some(terrace_crds::blobs::chunk_name(&key, i)),
                        ..Default::default()
                    },
                    data: Some(BTreeMap::from([("chunk".to_owned(), ByteString(vec![1]))])),
                    ..Default::default()
                },
            )
            .await?;
    }
    Ok(())
}

async fn status_of(client: &Client, id: &str) -> Option<String> {
    let api: Api<StateVersion> = Api::namespaced(client.clone(), NS);
    api.get(&id.to_ascii_lowercase()).await.ok()?.status?.status
}

async fn chunks(client: &Client, id: &str) -> usize {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NS);
    let key = terrace_crds::blobs::state_key(id);
    let mut n = 0;
    for i in 0..2 {
        if secrets
            .get_opt(&terrace_crds::blobs::chunk_name(&key, i))
            .await
            .ok()
            .flatten()
            .is_some()
        {
            n += 1;
        }
    }
    n
}

async fn set_policy(client: &Client, ws: &str, policy: DataRetentionPolicy) -> R {
    let api: Api<Workspace> = Api::namespaced(client.clone(), NS);
    api.patch(
        ws,
        &PatchParams::default(),
        &Patch::Merge(&serde_json::json!({"spec": {"dataRetentionPolicy": policy}})),
    )
    .await?;
    Ok(())
}

#[tokio::test]
async fn old_state_data_expires_except_the_current_state() -> Result<(), E> {
    let (sim, client) = common::cluster(false).await?;
    let _stop = common::operator(&sim, terrace_operator::Settings::default()).await?;
    common::organization(&client, NS).await?;
    let workspaces: Api<Workspace> = Api::namespaced(client.clone(), NS);
    for name in ["app", "kept"] {
        workspaces
            .create(
                &PostParams::default(),
                &Workspace {
                    metadata: ObjectMeta {
                        name: Some(name.into()),
                        ..Default::default()
                    },
                    spec: WorkspaceSpec {
                        name: name.into(),
                        ..WorkspaceSpec::default_for_create()
                    },
                    status: None,
                },
            )
            .await?;
    }
    // app: three versions written 5, 4 and 3 days ago (the last is current); kept: two.
    version(&client, "app", "sv-App0000000000001", 1, 5).await?;
    version(&client, "app", "sv-App0000000000002", 2, 4).await?;
    version(&client, "app", "sv-App0000000000003", 3, 3).await?;
    version(&client, "kept", "sv-Kept000000000001", 1, 5).await?;
    version(&client, "kept", "sv-Kept000000000002", 2, 4).await?;

    // A policy set later reaches versions already stored: older than 2 days goes.
    set_policy(
        &client,
        "app",
        DataRetentionPolicy {
            delete_older_than_n_days: Some(2),
            dont_delete: None,
        },
    )
    .await?;
    for id in ["sv-App0000000000001", "sv-App0000000000002"] {
        eventually(&format!("{id} expired"), || async {
            (status_of(&client, id).await.as_deref() == Some("backing_data_soft_deleted"))
                .then_some(())
        })
        .await?;
        assert_eq!(
            chunks(&client, id).await,
            2,
            "{id}: kept for the grace period"
        );
    }
    // The current state stays, with its data.
    assert_eq!(
        status_of(&client, "sv-App0000000000003").await.as_deref(),
        Some("finalized")
    );
    assert_eq!(chunks(&client, "sv-App0000000000003").await, 2);

    // A newer version makes the previous current one eligible at once.
    version(&client, "app", "sv-App0000000000004", 4, 0).await?;
    eventually("the previous current version expired", || async {
        (status_of(&client, "sv-App0000000000003").await.as_deref()
            == Some("backing_data_soft_deleted"))
        .then_some(())
    })
    .await?;
    assert_eq!(chunks(&client, "sv-App0000000000004").await, 2);

    // Soft-deleted longer ago than the grace period (a week by default): gone for good.
    let eight_days_ago = jiff::Timestamp::now()
        .checked_sub(jiff::SignedDuration::from_hours(8 * 24))?
        .strftime("%Y-%m-%dT%H:%M:%S%.3fZ")
        .to_string();
    let versions: Api<StateVersion> = Api::namespaced(client.clone(), NS);
    versions
        .patch_status(
            &"sv-App0000000000001".to_ascii_lowercase(),
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"status": {"backingDataDeletedAt": eight_days_ago}})),
        )
        .await?;
    eventually("data soft-deleted 8 days ago deleted for good", || async {
        (status_of(&client, "sv-App0000000000001").await.as_deref()
            == Some("backing_data_permanently_deleted"))
        .then_some(())
    })
    .await?;
    assert_eq!(chunks(&client, "sv-App0000000000001").await, 0);
    // Soft-deleted within the grace period: still there.
    assert_eq!(chunks(&client, "sv-App0000000000002").await, 2);

    // dont-delete on "kept", and no policy at all before: everything stays.
    set_policy(
        &client,
        "kept",
        DataRetentionPolicy {
            delete_older_than_n_days: None,
            dont_delete: Some(true),
        },
    )
    .await?;
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    for id in ["sv-Kept000000000001", "sv-Kept000000000002"] {
        assert_eq!(status_of(&client, id).await.as_deref(), Some("finalized"));
        assert_eq!(chunks(&client, id).await, 2);
    }
    Ok(())
}
