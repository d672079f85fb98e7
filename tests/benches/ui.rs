//! Benchmark of issue 29 (the web view): the server render of the workspace list page
//! (`GET /app/:org/workspaces`, the first page of 20, with its project filter) over an
//! organization of 10,000 workspaces, p50 of 200 requests, beside the JSON:API list the
//! page is made from (`GET /api/v2/organizations/:org/workspaces?include=current_run,
//! project&page[size]=20`) in the same run. In-process (the API router with the index
//! filled directly, as the scale benchmark's search phase), so the figure is the
//! server's work, not a network's. Target: p50 ≤ 5 ms.
//!
//! Run: `cargo bench -p terrace-tests --bench ui` (release-optimized by cargo bench;
//! `TERRACE_UI_WORKSPACES`, default 10000).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use http_body_util::BodyExt;
use kube::api::ObjectMeta;
use terrace_api_server::{AppState, Settings, router};
use terrace_crds::constants::{LABEL_DEFAULT_PROJECT, LABEL_ID};
use terrace_crds::ids::{IdKind, new_id};
use terrace_crds::{
    Organization, OrganizationSpec, Project, ProjectSpec, Workspace, WorkspaceSpec,
};
use terrace_tests::bench::{env_usize, median};
use tower::ServiceExt;

const ORG: &str = "uibench";

fn workspace(i: usize) -> Workspace {
    let id = new_id(IdKind::Workspace);
    let mut spec = WorkspaceSpec::default_for_create();
    spec.name = format!("svc-{i:06}");
    Workspace {
        metadata: ObjectMeta {
            name: Some(id.to_ascii_lowercase()),
            namespace: Some(ORG.into()),
            uid: Some(format!("uid-{i}")),
            resource_version: Some("1".into()),
            labels: Some(BTreeMap::from([(LABEL_ID.to_owned(), id)])),
            ..Default::default()
        },
        spec,
        status: None,
    }
}

fn organization(state: &AppState) {
    state.index.insert(Organization {
        metadata: ObjectMeta {
            name: Some(ORG.into()),
            uid: Some("org-uid".into()),
            ..Default::default()
        },
        spec: OrganizationSpec {
            name: Some(ORG.into()),
            ..Default::default()
        },
        status: None,
    });
    state.index.insert(Project {
        metadata: ObjectMeta {
            name: Some("default".into()),
            namespace: Some(ORG.into()),
            uid: Some("prj-uid".into()),
            labels: Some(BTreeMap::from([
                (LABEL_ID.to_owned(), new_id(IdKind::Project)),
                (LABEL_DEFAULT_PROJECT.to_owned(), "true".to_owned()),
            ])),
            ..Default::default()
        },
        spec: ProjectSpec {
            name: "Default Project".into(),
            ..Default::default()
        },
        status: None,
    });
}

/// Times `n` GETs of `uri` with header `auth` (name, value); answers the samples.
async fn times(app: &axum::Router, uri: &str, auth: (&str, &str), n: usize) -> Vec<Duration> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let req = Request::get(uri)
            .header(auth.0, auth.1)
            .header(header::HOST, "127.0.0.1")
            .body(Body::empty())
            .expect("request");
        let start = Instant::now();
        let res = app.clone().oneshot(req).await.expect("response");
        let status = res.status();
        let body = res.into_body().collect().await.expect("body").to_bytes();
        out.push(start.elapsed());
        assert_eq!(
            status,
            StatusCode::OK,
            "{uri}: {}",
            String::from_utf8_lossy(&body)
        );
    }
    out
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn main() {
    let n = env_usize("TERRACE_UI_WORKSPACES", 10_000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let sim = terrace_simulator::Simulator::open(Default::default())
            .await
            .expect("simulator");
        let token = sim.admin_token();
        let state = AppState::new(Settings::default(), sim.client());
        organization(&state);
        for i in 0..n {
            state.index.insert(workspace(i));
        }
        let app = router(state.clone());
        // Sign in as a person would.
        let req = Request::post("/app/session")
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(Body::from(format!("token={token}&next=/app")))
            .expect("request");
        let res = app.clone().oneshot(req).await.expect("sign in");
        assert_eq!(res.status(), StatusCode::SEE_OTHER, "signed in");
        let cookie = res
            .headers()
            .get(header::SET_COOKIE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .expect("session cookie")
            .to_owned();
        let bearer = format!("Bearer {token}");
        let page = format!("/app/{ORG}/workspaces");
        let api = format!(
            "/api/v2/organizations/{ORG}/workspaces?include=current_run,project&page%5Bsize%5D=20&page%5Bnumber%5D=1&sort=name"
        );
        // Warm both (caches of the caller's rights and rendered documents).
        times(&app, &page, ("cookie", &cookie), 20).await;
        times(&app, &api, ("authorization", &bearer), 20).await;
        let base = median(times(&app, &api, ("authorization", &bearer), 200).await);
        let mut samples = times(&app, &page, ("cookie", &cookie), 200).await;
        samples.sort();
        let p90 = samples[samples.len() * 9 / 10];
        let p50 = median(samples);
        println!("issue 29 web view benchmark: {n} workspaces in one organization, in-process");
        println!("  JSON:API list, 20 per page (baseline)  p50 {:>7.3} ms", ms(base));
        println!(
            "  workspace list page /app/{ORG}/workspaces  p50 {:>7.3} ms  p90 {:>7.3} ms  ratio {:.2}x  (target p50 <= 5 ms)",
            ms(p50),
            ms(p90),
            p50.as_secs_f64() / base.as_secs_f64()
        );
        sim.shutdown().await;
    });
}
