//! Leader election against the cluster simulator: candidates racing for the
//! `coordination.k8s.io/v1` Lease, renewal, takeover of an expired lease, handover on
//! release, and the operator stopping its controllers when the lease is taken. Relies on
//! kube-apiserver's create (AlreadyExists) and update with a resourceVersion
//! precondition (409 Conflict) for Leases, which the simulator serves generically.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use terrace_crds::{Organization, OrganizationSpec};
use terrace_operator::leader::{Attempt, LEASE_NAME, LeaderElector, Lost, Timing};
use terrace_operator::{Settings, Stopped};
use terrace_simulator::{SimConfig, Simulator};
use tokio::sync::oneshot;

use crate::common::{self, R, install_crds};

const NS: &str = "terrace-system";

/// Short timing (defaults: 15 s / 5 s / 10 s / 2 s), with a lease long enough that a
/// loaded machine delaying one renewal does not hand the lease over.
fn timing() -> Timing {
    Timing {
        lease_duration: Duration::from_secs(3),
        renew_interval: Duration::from_millis(300),
        renew_deadline: Duration::from_secs(2),
        retry_period: Duration::from_millis(100),
    }
}

async fn cluster() -> Result<(Simulator, Client), Box<dyn std::error::Error>> {
    let sim = Simulator::open(SimConfig {
        data_dir: None,
        ..Default::default()
    })
    .await?;
    let client = sim.client();
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(NS.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await?;
    Ok((sim, client))
}

fn elector(client: &Client, identity: &str) -> LeaderElector {
    LeaderElector::new(client.clone(), NS, identity.into(), timing())
}

async fn holder(client: &Client) -> Option<String> {
    let lease = Api::<Lease>::namespaced(client.clone(), NS)
        .get_opt(LEASE_NAME)
        .await
        .ok()??;
    lease.spec?.holder_identity.filter(|h| !h.is_empty())
}

/// Two candidates race for an absent lease: exactly one leads, the other stands by while
/// the leader renews (for longer than a lease duration), and takes over within a retry
/// period once the leader releases the lease.
#[tokio::test]
async fn one_of_two_racing_candidates_leads_and_hands_over_on_release() -> R {
    let (_sim, client) = cluster().await?;
    let mut a = elector(&client, "operator-a");
    let mut b = elector(&client, "operator-b");
    let (ra, rb) = tokio::join!(a.try_acquire_or_renew(), b.try_acquire_or_renew());
    let (ra, rb) = (ra?, rb?);
    let winners = [&ra, &rb]
        .iter()
        .filter(|r| ***r == Attempt::Leading)
        .count();
    assert_eq!(winners, 1, "a: {ra:?}, b: {rb:?}");
    let (mut leader, mut standby) = if ra == Attempt::Leading {
        (a, b)
    } else {
        (b, a)
    };
    let leader_id = leader.identity().to_owned();
    assert_eq!(holder(&client).await.as_deref(), Some(leader_id.as_str()));

    // The leader renews; the standby never gets it, even after several lease durations.
    let held = tokio::spawn(async move {
        let lost = tokio::time::timeout(Duration::from_secs(5), leader.hold()).await;
        (leader, lost)
    });
    let standby_won = tokio::time::timeout(Duration::from_secs(5), standby.acquire()).await;
    assert!(standby_won.is_err(), "the standby acquired a renewed lease");
    let (mut leader, lost) = held.await?;
    assert!(lost.is_err(), "the leader lost its lease: {lost:?}");

    // Handover: release, and the standby leads within a few retry periods.
    leader.release().await?;
    assert_eq!(holder(&client).await, None);
    let started = tokio::time::Instant::now();
    tokio::time::timeout(Duration::from_secs(1), standby.acquire()).await?;
    assert!(started.elapsed() < timing().lease_duration);
    assert_eq!(
        holder(&client).await.as_deref(),
        Some(standby.identity()),
        "the standby holds the lease"
    );
    let lease = Api::<Lease>::namespaced(client.clone(), NS)
        .get(LEASE_NAME)
        .await?;
    assert_eq!(lease.spec.and_then(|s| s.lease_transitions), Some(1));
    Ok(())
}

/// A leader that stops renewing (crashed: no release) is taken over only after the
/// standby has seen the same record for a whole lease duration.
#[tokio::test]
async fn an_abandoned_lease_is_taken_over_after_the_lease_duration() -> R {
    let (_sim, client) = cluster().await?;
    let mut a = elector(&client, "operator-a");
    assert_eq!(a.try_acquire_or_renew().await?, Attempt::Leading);
    drop(a);
    let mut b = elector(&client, "operator-b");
    let started = tokio::time::Instant::now();
    tokio::time::timeout(Duration::from_secs(8), b.acquire()).await?;
    assert!(
        started.elapsed() >= timing().lease_duration,
        "took over after {:?}",
        started.elapsed()
    );
    assert_eq!(holder(&client).await.as_deref(), Some("operator-b"));
    Ok(())
}

/// A leader whose lease was taken (here: overwritten by an intruder) notices at its
/// next renewal.
#[tokio::test]
async fn a_leader_notices_that_its_lease_was_taken() -> R {
    let (_sim, client) = cluster().await?;
    let mut a = elector(&client, "operator-a");
    assert_eq!(a.try_acquire_or_renew().await?, Attempt::Leading);
    let api: Api<Lease> = Api::namespaced(client.clone(), NS);
    let mut lease = api.get(LEASE_NAME).await?;
    let spec = lease.spec.get_or_insert_with(Default::default);
    spec.holder_identity = Some("intruder".into());
    spec.renew_time = Some(MicroTime(k8s_openapi::jiff::Timestamp::now()));
    api.replace(LEASE_NAME, &PostParams::default(), &lease)
        .await?;
    let lost = tokio::time::timeout(Duration::from_secs(3), a.hold()).await?;
    assert_eq!(lost, Lost::TakenBy("intruder".into()));
    Ok(())
}

fn elected_settings(identity: &str) -> Settings {
    Settings {
        leader_election: true,
        leader_election_namespace: Some(NS.into()),
        leader_election_identity: Some(identity.into()),
        ..Settings::default()
    }
}

async fn organization_reconciled(
    client: &Client,
    name: &str,
) -> Result<(), Box<dyn std::error::Error>> {
    let orgs: Api<Organization> = Api::all(client.clone());
    let org = Organization {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        spec: OrganizationSpec::default(),
        status: None,
    };
    orgs.create(&PostParams::default(), &org).await?;
    common::eventually_within(
        &format!("organization {name} reconciled"),
        Duration::from_secs(20),
        || async {
            let o = orgs.get(name).await.ok()?;
            o.status?.default_project_id
        },
    )
    .await?;
    Ok(())
}

/// Two operators with leader election: one leads and reconciles; when it shuts down it
/// releases the lease and the other takes over and reconciles; an operator whose lease
/// is taken stops with [`Stopped::LeaseLost`].
#[tokio::test]
async fn operators_hand_over_and_stop_when_the_lease_is_taken() -> R {
    let (_sim, client) = cluster().await?;
    install_crds(&client).await?;
    let mut stops = Vec::new();
    let mut tasks = Vec::new();
    for id in ["op-a", "op-b"] {
        let (tx, rx) = oneshot::channel::<()>();
        stops.push(tx);
        tasks.push(tokio::spawn(terrace_operator::run_elected_with(
            client.clone(),
            elected_settings(id),
            timing(),
            async move {
                let _ = rx.await;
            },
        )));
    }
    let first =
        common::eventually_within("a leader", Duration::from_secs(5), || holder(&client)).await?;
    organization_reconciled(&client, "acme").await?;

    // The leader shuts down: it releases, the other one leads and reconciles.
    let (i, j) = if first == "op-a" { (0, 1) } else { (1, 0) };
    let leader_stop = stops.remove(i);
    let _ = leader_stop.send(());
    let leader_task = tasks.remove(i);
    let stopped = tokio::time::timeout(Duration::from_secs(10), leader_task).await??;
    assert_eq!(stopped, Stopped::Shutdown);
    let second = common::eventually_within("the other leader", Duration::from_secs(1), || async {
        holder(&client).await.filter(|h| *h != first)
    })
    .await?;
    assert_eq!(second, ["op-a", "op-b"][j]);
    organization_reconciled(&client, "globex").await?;

    // An intruder takes the lease: the operator stops its controllers and says why.
    let api: Api<Lease> = Api::namespaced(client.clone(), NS);
    let mut lease = api.get(LEASE_NAME).await?;
    let spec = lease.spec.get_or_insert_with(Default::default);
    spec.holder_identity = Some("intruder".into());
    spec.lease_duration_seconds = Some(3600);
    api.replace(LEASE_NAME, &PostParams::default(), &lease)
        .await?;
    let stopped = tokio::time::timeout(Duration::from_secs(5), tasks.remove(0)).await??;
    assert_eq!(
        stopped,
        Stopped::LeaseLost(Lost::TakenBy("intruder".into()))
    );
    Ok(())
}
