//! The automatic test run of an upload (issue 13), against the cluster simulator with the
//! real operator: after the grace period exactly one run, none when an explicit run
//! claimed the configuration version, and of the operator and many concurrent claimers
//! exactly one wins. The claimers here write the marker as the API server does
//! (`due` → `superseded`, a merge patch carrying the resourceVersion read; the simulator
//! answers 409 to a stale one, as the kube-apiserver does).

use std::time::Duration;

use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use terrace_crds::constants::ANNOTATION_AUTOMATIC_TEST_RUN;
use terrace_crds::{
    ConfigurationVersion, ConfigurationVersionSpec, RegistryModule, RegistryModuleSpec, TestRun,
};
use terrace_simulator::Simulator;
use tokio::sync::oneshot;

use crate::common::{self, E, R, eventually};

const NS: &str = "acme";

struct Cluster {
    _sim: Simulator,
    client: Client,
    _stop: oneshot::Sender<()>,
}

/// A simulator with the operator (grace period `delay`), Organization `acme` and module
/// `vpc`. Pods are not run: the runs stay pending or queued, which is all these tests
/// look at.
async fn start(delay: Duration) -> Result<Cluster, E> {
    let (sim, client) = common::cluster(false).await?;
    let settings = terrace_operator::Settings {
        auto_test_run_delay: delay,
        api_internal_url: "http://api.test:8080".into(),
        ..Default::default()
    };
    let tx = common::operator(&sim, settings).await?;
    common::organization(&client, NS).await?;
    Api::<RegistryModule>::namespaced(client.clone(), NS)
        .create(
            &PostParams::default(),
            &RegistryModule::new(
                "vpc",
                RegistryModuleSpec {
                    name: "vpc".into(),
                    provider: "aws".into(),
                    namespace: None,
                    registry_name: "private".into(),
                    publish_only_tested: None,
                },
            ),
        )
        .await?;
    Ok(Cluster {
        _sim: sim,
        client,
        _stop: tx,
    })
}

impl Cluster {
    fn cvs(&self) -> Api<ConfigurationVersion> {
        Api::namespaced(self.client.clone(), NS)
    }

    fn runs(&self) -> Api<TestRun> {
        Api::namespaced(self.client.clone(), NS)
    }

    /// A configuration version of `vpc` as the API server leaves it after an accepted
    /// upload: marker `due` (unless `marker` is None), status uploaded now.
    async fn uploaded(&self, name: &str, marker: Option<&str>) -> Result<(), E> {
        self.pending(name, marker).await?;
        Ok(mark_uploaded(&self.cvs(), name).await?)
    }

    /// The same, before its upload status is written.
    async fn pending(&self, name: &str, marker: Option<&str>) -> Result<(), E> {
        let mut cv = ConfigurationVersion::new(
            name,
            ConfigurationVersionSpec {
                ingress_attributes: None,
                module: Some("vpc".into()),
                workspace: None,
                auto_queue_runs: true,
                speculative: false,
                source: "svc-api".into(),
                provisional: false,
            },
        );
        if let Some(m) = marker {
            cv.metadata.annotations =
                Some([(ANNOTATION_AUTOMATIC_TEST_RUN.to_owned(), m.to_owned())].into());
        }
        self.cvs().create(&PostParams::default(), &cv).await?;
        Ok(())
    }

    async fn marker(&self, cv: &str) -> Option<String> {
        let cv = self.cvs().get_opt(cv).await.ok().flatten()?;
        cv.annotations().get(ANNOTATION_AUTOMATIC_TEST_RUN).cloned()
    }

    /// The runs naming configuration version `cv`.
    async fn runs_of(&self, cv: &str) -> Result<Vec<TestRun>, E> {
        let all = self.runs().list(&Default::default()).await?;
        Ok(all
            .items
            .into_iter()
            .filter(|r| r.spec.configuration_version == cv)
            .collect())
    }

    async fn claim_explicitly(&self, cv: &str) -> Result<bool, E> {
        Ok(claim_explicitly(&self.cvs(), cv).await?)
    }
}

/// The upload's status write: uploaded, now.
async fn mark_uploaded(cvs: &Api<ConfigurationVersion>, name: &str) -> Result<(), kube::Error> {
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    cvs.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"status": "uploaded", "uploadedAt": now}})),
    )
    .await?;
    Ok(())
}

/// What the API server does for an explicit run: `due` → `superseded` under the
/// resourceVersion read, re-read and decided again after a 409. Answers whether this
/// claim changed the marker.
async fn claim_explicitly(cvs: &Api<ConfigurationVersion>, cv: &str) -> Result<bool, kube::Error> {
    loop {
        let current = cvs.get(cv).await?;
        if current
            .annotations()
            .get(ANNOTATION_AUTOMATIC_TEST_RUN)
            .map(String::as_str)
            != Some("due")
        {
            return Ok(false);
        }
        let patch = json!({"metadata": {
            "resourceVersion": current.resource_version(),
            "annotations": {ANNOTATION_AUTOMATIC_TEST_RUN: "superseded"},
        }});
        match cvs
            .patch(cv, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => return Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(e) => return Err(e),
        }
    }
}

/// An upload nobody creates a run for gets exactly one automatic run
/// (`svc-configuration-version`, owned by the module, named after the configuration
/// version), not before the grace period, and never a second one.
#[tokio::test]
async fn one_automatic_run_after_the_grace_period() -> R {
    let c = start(Duration::from_millis(1500)).await?;
    c.uploaded("cv1", Some("due")).await?;
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(
        c.runs_of("cv1").await?.is_empty(),
        "not within the grace period"
    );
    let run = eventually("the automatic run", || async {
        c.runs().get_opt("cv1-auto").await.ok().flatten()
    })
    .await?;
    assert_eq!(run.spec.source, "svc-configuration-version");
    assert_eq!(run.spec.module, "vpc");
    assert_eq!(run.spec.test_directory, "tests");
    let owner = run.owner_references().first().cloned().unwrap_or_default();
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("RegistryModule", "vpc")
    );
    assert!(run.labels().contains_key("terrace.dev/id"));
    eventually("the marker created", || async {
        (c.marker("cv1").await.as_deref() == Some("created")).then_some(())
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(c.runs_of("cv1").await?.len(), 1);
    // Deleted by its user, it stays deleted.
    c.runs().delete("cv1-auto", &Default::default()).await?;
    c.cvs()
        .patch(
            "cv1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"touched": "yes"}}})),
        )
        .await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(c.runs().get_opt("cv1-auto").await?.is_none());
    Ok(())
}

/// An explicit claim within the grace period: no automatic run, also long after it. A
/// configuration version without the marker (uploaded before automatic runs moved to the
/// operator, or never due) gets none either; one a run (kubectl) already tests is
/// superseded.
#[tokio::test]
async fn an_explicit_claim_or_no_marker_means_no_automatic_run() -> R {
    let c = start(Duration::from_millis(800)).await?;
    c.uploaded("cv1", Some("due")).await?;
    assert!(c.claim_explicitly("cv1").await?);
    c.uploaded("cv2", None).await?;
    c.runs()
        .create(
            &PostParams::default(),
            &TestRun::new(
                "by-kubectl",
                terrace_crds::testrun::automatic::run_spec("vpc", "cv3"),
            ),
        )
        .await?;
    c.uploaded("cv3", Some("due")).await?;
    eventually("cv3 superseded", || async {
        (c.marker("cv3").await.as_deref() == Some("superseded")).then_some(())
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(c.runs_of("cv1").await?.is_empty());
    assert!(c.runs_of("cv2").await?.is_empty());
    assert_eq!(c.runs_of("cv3").await?.len(), 1);
    assert_eq!(c.marker("cv1").await.as_deref(), Some("superseded"));
    assert_eq!(c.marker("cv2").await, None);
    Ok(())
}

/// A crash between the claim and the create: the operator finds `claimed` and creates
/// the run (once).
#[tokio::test]
async fn a_claim_without_its_run_gets_it() -> R {
    let c = start(Duration::ZERO).await?;
    c.uploaded("cv1", Some("claimed")).await?;
    eventually("the automatic run", || async {
        c.runs().get_opt("cv1-auto").await.ok().flatten()
    })
    .await?;
    eventually("the marker created", || async {
        (c.marker("cv1").await.as_deref() == Some("created")).then_some(())
    })
    .await?;
    assert_eq!(c.runs_of("cv1").await?.len(), 1);
    Ok(())
}

/// The race: for each of many configuration versions, several concurrent explicit
/// claimers and the operator (grace period zero) go for the same `due` marker. Exactly one
/// wins every time: either one claimer (marker superseded, no automatic run) or the
/// operator (marker created, exactly one automatic run); never both, never neither.
#[tokio::test]
async fn of_the_operator_and_many_explicit_claims_exactly_one_wins() -> R {
    let c = start(Duration::ZERO).await?;
    let names: Vec<String> = (0..16).map(|i| format!("race{i}")).collect();
    for name in &names {
        c.pending(name, Some("due")).await?;
    }
    // Each upload completes (the operator sees it and claims at once), and a few
    // milliseconds later (0 to 15, varying) four explicit claims go for it concurrently.
    let mut claims = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let (cvs, name) = (c.cvs(), name.clone());
        claims.push(tokio::spawn(async move {
            mark_uploaded(&cvs, &name).await.ok()?;
            tokio::time::sleep(Duration::from_millis((i as u64 * 7) % 16)).await;
            let four = (0..4).map(|_| claim_explicitly(&cvs, &name));
            let won = futures::future::join_all(four).await;
            let won: Option<Vec<bool>> = won.into_iter().map(Result::ok).collect();
            Some((name, won?.into_iter().filter(|w| *w).count() as u32))
        }));
    }
    let mut won_by_claimer = std::collections::HashMap::<String, u32>::new();
    for claim in claims {
        let (name, won) = claim.await?.ok_or("a claimer failed")?;
        won_by_claimer.insert(name, won);
    }
    // Let the operator finish whatever it claimed.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (mut operator_wins, mut claimer_wins) = (0, 0);
    for name in &names {
        let marker = c.marker(name).await;
        let automatic = c.runs_of(name).await?.len();
        let claimers = won_by_claimer.get(name).copied().unwrap_or(0);
        match marker.as_deref() {
            Some("superseded") => {
                assert_eq!((claimers, automatic), (1, 0), "{name}");
                claimer_wins += 1;
            }
            Some("created") => {
                assert_eq!((claimers, automatic), (0, 1), "{name}");
                operator_wins += 1;
            }
            other => panic!("{name}: marker {other:?}, {claimers} claims, {automatic} runs"),
        }
    }
    assert_eq!(operator_wins + claimer_wins, names.len());
    eprintln!("operator won {operator_wins}, explicit claims won {claimer_wins}");
    Ok(())
}
