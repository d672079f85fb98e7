//! The `log-read-url` of a test run: the engine's output, through a capability URL that
//! needs no Authorization header (go-tfe's log reader sends none), signed for that one
//! run and expiring ([`log_read_path`]); the same output stays readable at
//! `/test-runs/:id/logs` with a token and `get` on test runs. While the run is not final it is read live from the run's Pod through
//! the Kubernetes API (`pods/log`, container `engine`); once final (or when the Pod is
//! gone) from the archive the operator writes before releasing the Pod: ConfigMap
//! `<pod name>-log`, binaryData `log.gz`, gzip-compressed (the operator's `testpod` log
//! archive contract), falling back to the Pod — unless the runner stored the log in the
//! blob store as it ran (`PUT /api/v2/runner/test-runs/:id/log/:part`, with the log
//! token of the run's Secret), which is read first ([`crate::pod_logs`]).
//!
//! Like TFE's log endpoint the text is framed by STX (0x02) at the start and, once the run
//! is in a final state, ETX (0x03) at the end: go-tfe's log reader stops on that frame. It
//! asks for `?limit=N&offset=M` byte windows, which are cut from the framed text. A run
//! with neither Pod nor archive reads as no output.

use terrace_crds::testrun::TestRunState;

use crate::pod_logs;
use crate::prelude::*;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v2/test-runs/{run}/logs", get(read))
        .route(
            "/api/v2/test-runs/{run}/log/{token}",
            get(read_with_capability),
        )
}

/// The runner's upload of its log's parts (its own, larger body limit).
pub fn upload_router() -> Router<AppState> {
    Router::new()
        .route("/api/v2/runner/test-runs/{run}/log/{part}", put(put_part))
        .layer(axum::extract::DefaultBodyLimit::max(
            terrace_crds::run::logs::PART_BYTES + 1024,
        ))
}

/// Secret key of the log token in the run's Secret (the operator's `testpod` contract:
/// the Secret is named as the run's Pod).
const LOG_TOKEN_KEY: &str = "log-token";

/// `PUT /api/v2/runner/test-runs/:id/log/:part`: part `part` of the run's log, as its
/// runner copies it (`terrace_crds::run::logs`), with the log token of the run's Secret
/// as bearer token, while the run is not final (401 otherwise, the same for an unknown
/// run).
async fn put_part(
    State(state): State<AppState>,
    Path((run, part)): Path<(String, String)>,
    headers: axum::http::HeaderMap,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    let unauthorized = || ApiError::Unauthorized("a valid log token is required".into());
    let presented = crate::auth::bearer_token(&headers).ok_or_else(unauthorized)?;
    let r = run_with(&state, &run).map_err(|_| unauthorized())?;
    if TestRunState::of(r.status.as_ref()).is_ok_and(TestRunState::is_final) {
        return Err(unauthorized());
    }
    let ns = r.namespace().unwrap_or_default();
    let pod = r
        .status
        .as_ref()
        .and_then(|s| s.pod_name.clone())
        .ok_or_else(unauthorized)?;
    let uid = r.metadata.uid.clone().unwrap_or_default();
    let held = state
        .secret_tokens
        .holds(
            &state,
            &ns,
            &format!("{uid}/{pod}"),
            &pod,
            LOG_TOKEN_KEY,
            presented,
        )
        .await?;
    if !held {
        return Err(unauthorized());
    }
    let part: u64 = part
        .parse()
        .map_err(|_| ApiError::bad_parameter("part", "the part must be a number"))?;
    let store = crate::blobs::store(&state, &ns, r.controller_owner_ref(&()));
    pod_logs::store_part(&store, &pod, part, &body, state.settings.max_log_bytes).await
}

/// The path of a run's logs (for callers with a token and `get` on test runs).
pub fn log_path(run_id: &str) -> String {
    format!("/api/v2/test-runs/{run_id}/logs")
}

/// Purpose of log-read tokens.
pub const LOG_PURPOSE: &str = "test-run-log";
/// How long a log-read URL works (a CLI streams one run's log through one URL).
pub const LOG_URL_TTL: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// The `log-read-url` path of a run: a capability URL (go-tfe's log reader sends no
/// Authorization header), bound to this run, expiring after [`LOG_URL_TTL`].
pub fn log_read_path(state: &AppState, run_id: &str) -> String {
    let token = state.signer.sign(LOG_PURPOSE, run_id, LOG_URL_TTL);
    format!("/api/v2/test-runs/{run_id}/log/{token}")
}

async fn read(
    Authed { state, caller }: Authed,
    Path(run): Path<String>,
    q: QueryParams,
) -> Result<Response, ApiError> {
    let (r, archived) = live_or_archived(&state, &run).await?;
    let ns = r.namespace().unwrap_or_default();
    if !state
        .allowed(&caller, &Check::new("get", "testruns", &ns, None))
        .await?
    {
        return Err(not_found());
    }
    respond(&state, &r, archived, &q).await
}

/// The log through its capability URL: no Authorization, the token signed for this run
/// (another run's ID, a forged or expired token: 404).
async fn read_with_capability(
    State(state): State<AppState>,
    Path((run, token)): Path<(String, String)>,
    q: QueryParams,
) -> Result<Response, ApiError> {
    if !state.signer.verify(LOG_PURPOSE, &run, &token) {
        return Err(not_found());
    }
    let (r, archived) = live_or_archived(&state, &run).await?;
    respond(&state, &r, archived, &q).await
}

fn not_found() -> ApiError {
    ApiError::not_found("test run not found")
}

fn run_with(state: &AppState, id: &str) -> Result<Arc<terrace_crds::TestRun>, ApiError> {
    state
        .index
        .read()
        .test_runs()
        .get(id)
        .cloned()
        .ok_or_else(not_found)
}

/// The run `id`, live or archived ([`crate::history`]), and whether it is archived.
async fn live_or_archived(
    state: &AppState,
    id: &str,
) -> Result<(Arc<terrace_crds::TestRun>, bool), ApiError> {
    if let Ok(r) = run_with(state, id) {
        return Ok((r, false));
    }
    match state
        .history
        .find::<terrace_crds::TestRun>(state, id)
        .await?
    {
        Some((r, _, _)) => Ok((r, true)),
        None => Err(not_found()),
    }
}

/// The framed `limit`/`offset` window of a run's log.
async fn respond(
    state: &AppState,
    r: &terrace_crds::TestRun,
    is_archived: bool,
    q: &QueryParams,
) -> Result<Response, ApiError> {
    let ns = r.namespace().unwrap_or_default();
    let status = r.status.as_ref();
    let pod = status.and_then(|s| s.pod_name.as_deref());
    let note = status.and_then(|s| s.wait_note.as_deref());
    let run_state = TestRunState::of(r.status.as_ref()).ok();
    let finished = run_state.is_some_and(TestRunState::is_final);
    let cause = status
        .and_then(|s| s.message.as_deref())
        .filter(|_| run_state == Some(TestRunState::Errored));
    let archived = match (is_archived, pod) {
        (true, Some(pod)) => Some(
            state
                .history
                .log::<terrace_crds::TestRun>(state, &crate::render::id_of(r), pod)
                .await?
                .unwrap_or_default(),
        ),
        (true, None) => Some(Vec::new()),
        (false, _) => None,
    };
    pod_logs::respond(
        pod_logs::LogRead {
            client: &state.client,
            store: crate::blobs::store(state, &ns, None),
            ns: &ns,
            pod,
            wait_note: note,
            finished,
            readable: false,
            cause,
            archived,
        },
        q,
    )
    .await
}

#[cfg(test)]
mod tests {
    use kube::Api;
    use kube::api::{Patch, PatchParams};
    use serde_json::json;
    use terrace_crds::TestRun;

    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    use crate::pod_logs::{ARCHIVE_KEY, archive_name, gunzip, window};
    use crate::testing::*;

    #[test]
    fn windows() {
        let t = b"\x02hello\x03";
        assert_eq!(window(t, None, None), t);
        assert_eq!(window(t, Some(1), Some(5)), b"hello");
        assert_eq!(window(t, Some(6), Some(100)), b"\x03");
        assert_eq!(window(t, Some(100), Some(5)), b"");
    }

    /// A run without a Pod reads as an empty framed log (STX only while not final, STX ETX
    /// once final); unknown runs and callers without `get` get 404; bad numbers 400.
    #[tokio::test]
    async fn logs_without_a_pod() {
        let h = Mh::with_module().await;
        let cv = h.uploaded_cv().await;
        let (_, doc) = h.run(&cv, json!({})).await;
        let id = doc["data"]["id"].as_str().unwrap_or_default().to_owned();
        let path = log_path(&id);
        let auth = format!("Bearer {}", h.token);
        let (st, _, body) = h
            .raw("GET", &path, &[("authorization", &auth)], vec![])
            .await;
        assert_eq!((st, &body[..]), (200, &b"\x02"[..]));
        let api: Api<TestRun> = Api::namespaced(h.admin.clone(), ORG);
        let r = api
            .patch_status(
                &id.to_ascii_lowercase(),
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"status": "errored", "podName": "gone"}})),
            )
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        crate::write::wait_seen(&h.state, &r).await;
        let (st, _, body) = h
            .raw(
                "GET",
                &format!("{path}?limit=10&offset=0"),
                &[("authorization", &auth)],
                vec![],
            )
            .await;
        assert_eq!((st, &body[..]), (200, &b"\x02\x03"[..]));
        let (st, _, _) = h
            .raw(
                "GET",
                &format!("{path}?limit=x"),
                &[("authorization", &auth)],
                vec![],
            )
            .await;
        assert_eq!(st, 400);
        let (st, _, _) = h
            .raw(
                "GET",
                &log_path("trun-nope"),
                &[("authorization", &auth)],
                vec![],
            )
            .await;
        assert_eq!(st, 404);
        let nobody = format!("Bearer {}", h.token_with_role(None).await);
        let (st, _, _) = h
            .raw("GET", &path, &[("authorization", &nobody)], vec![])
            .await;
        assert_eq!(st, 404);
    }

    /// A final run whose Pod is gone serves the operator's archive (ConfigMap
    /// `<pod>-log`, binaryData `log.gz`: ConfigMap binary values as kube-apiserver stores
    /// them, base64 in JSON), gunzipped and framed, with `limit`/`offset` windows.
    #[tokio::test]
    async fn archived_log_after_the_pod_is_gone() {
        use std::io::Write;
        let h = Mh::with_module().await;
        let cv = h.uploaded_cv().await;
        let (_, doc) = h.run(&cv, json!({})).await;
        let id = doc["data"]["id"].as_str().unwrap_or_default().to_owned();
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        enc.write_all(b"engine saw the interrupt\n")
            .unwrap_or_else(|e| panic!("{e}"));
        let gz = enc.finish().unwrap_or_else(|e| panic!("{e}"));
        let cms: Api<ConfigMap> = Api::namespaced(h.admin.clone(), ORG);
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some(archive_name("gone-run"));
        cm.binary_data = Some([(ARCHIVE_KEY.to_owned(), k8s_openapi::ByteString(gz))].into());
        cms.create(&kube::api::PostParams::default(), &cm)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let api: Api<TestRun> = Api::namespaced(h.admin.clone(), ORG);
        let r = api
            .patch_status(
                &id.to_ascii_lowercase(),
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"status": "canceled", "podName": "gone-run"}})),
            )
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        crate::write::wait_seen(&h.state, &r).await;
        let auth = format!("Bearer {}", h.token);
        let path = log_path(&id);
        let (st, _, body) = h
            .raw("GET", &path, &[("authorization", &auth)], vec![])
            .await;
        assert_eq!(
            (st, &body[..]),
            (200, &b"\x02engine saw the interrupt\n\x03"[..])
        );
        let (st, _, body) = h
            .raw(
                "GET",
                &format!("{path}?offset=1&limit=6"),
                &[("authorization", &auth)],
                vec![],
            )
            .await;
        assert_eq!((st, &body[..]), (200, &b"engine"[..]));
        assert_eq!(gunzip(b"not gzip"), None);
    }

    /// `log-read-url` is a capability URL: readable without a token (as go-tfe's log
    /// reader sends none), with the same limit/offset windows; bound to its run (another
    /// run's ID with this token: 404) and to its signature (tampered or expired: 404).
    #[tokio::test]
    async fn the_log_read_url_needs_no_token_and_only_works_for_its_run() {
        let h = Mh::with_module().await;
        let cv = h.uploaded_cv().await;
        let (_, a) = h.run(&cv, json!({})).await;
        let (_, b) = h.run(&cv, json!({})).await;
        let url = a["data"]["attributes"]["log-read-url"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let path = url.trim_start_matches("http://localhost").to_owned();
        assert!(path.starts_with("/api/v2/test-runs/"), "{url}");
        let (st, _, body) = h
            .raw("GET", &format!("{path}?limit=65536&offset=0"), &[], vec![])
            .await;
        assert_eq!((st, &body[..]), (200, &b"\x02"[..]));
        let (st, _, body) = h
            .raw("GET", &format!("{path}?limit=10&offset=5"), &[], vec![])
            .await;
        assert_eq!((st, body.len()), (200, 0), "past the end: 200 and empty");
        let a_id = a["data"]["id"].as_str().unwrap_or_default();
        let b_id = b["data"]["id"].as_str().unwrap_or_default();
        let other = path.replace(a_id, b_id);
        assert_eq!(h.raw("GET", &other, &[], vec![]).await.0, 404);
        let (prefix, token) = path.rsplit_once('/').unwrap_or_default();
        let (exp, mac) = token.split_once('.').unwrap_or_default();
        let tampered = format!("{prefix}/{}.{mac}", exp.parse::<i64>().unwrap_or(0) + 10);
        assert_eq!(h.raw("GET", &tampered, &[], vec![]).await.0, 404);
        let expired = format!("{prefix}/1.{mac}");
        assert_eq!(h.raw("GET", &expired, &[], vec![]).await.0, 404);
        // The authenticated endpoint still works; without a token it does not.
        assert_eq!(h.raw("GET", &log_path(a_id), &[], vec![]).await.0, 401);
    }
}
