//! Configuration versions of modules (SPEC.md A2, A3) and the archive endpoint of test Pods.
//!
//! Create answers an `upload-url` once: `{base}/api/v2/uploads/v1/object/<token>`, where
//! the token is a random capability. Only its SHA-256 is kept (an annotation on the
//! ConfigurationVersion, with an expiry an hour ahead), so the URL can never be shown
//! again. The PUT carries no credentials but the URL: the handler claims the token by
//! removing the annotations with a resourceVersion precondition (of concurrent PUTs
//! exactly one wins; the others and any later one get 404), validates the archive with
//! the runner's own rules ([`terrace_crds::archive`]: no absolute or `..` paths, no links
//! leaving it, no hard links or devices, bounded size), stores it through the
//! [`BlobStore`](crate::blobs::BlobStore) owned by the ConfigurationVersion, and moves it to
//! `uploaded` (or `errored` with a message for a bad archive, still answering 200 as TFE
//! does). The body streams into the store as it arrives, validated on the way
//! ([`crate::ingest`]), and is committed only once valid. With `auto-queue-runs` the
//! same claiming write marks the configuration version
//! due for an automatic test run ([`Marker::Due`]): the operator creates that run
//! (`svc-configuration-version`) after a grace period unless an explicit test run claimed
//! the configuration version first (see [`terrace_crds::testrun::automatic`]), so the
//! CLI's upload-then-create makes one run, not two.
//!
//! Test Pods fetch the archive from `GET /api/v2/test-archives/:cv-id` with the one-time
//! token the operator put in the Secret `<testrun-object-name>-run`; the handler compares
//! it, in constant time, with the tokens of the runs that use this configuration version,
//! and consumes it before serving: a second fetch with the same token is 401.

use axum::body::Body;
use axum::extract::DefaultBodyLimit;
use axum::http::HeaderMap;
use k8s_openapi::api::core::v1::Secret;
use terrace_crds::constants::ANNOTATION_AUTOMATIC_TEST_RUN;
use terrace_crds::ids::{IdKind, new_id};
use terrace_crds::registry::doc::ModuleDoc;
use terrace_crds::resources::{ArchiveRef, ConfigurationVersionSpec};
use terrace_crds::testrun::automatic::Marker;
use terrace_crds::testrun::{HEADER_TERRAFORM_INTEGRATION, TestSource};
use terrace_crds::{ConfigurationVersion, ConfigurationVersionState, ModuleVersion};
use tower_http::limit::RequestBodyLimitLayer;

use super::locate;
use crate::blobs::BlobStore;
use crate::capability::{constant_time_eq, sha256_hex};
use crate::prelude::*;

/// Largest accepted archive (TERRACE_MAX_UPLOAD_BYTES overrides it).
pub const DEFAULT_MAX_UPLOAD_BYTES: usize = 64 * 1024 * 1024;

type TPath = (String, String, String, String);

pub fn router() -> Router<AppState> {
    Router::new()
        .route(
            "/api/v2/organizations/{org}/tests/registry-modules/private/{namespace}/{name}/{provider}/test-runs/configuration-versions",
            post(create),
        )
        .route("/api/v2/configuration-versions/{id}", get(show))
        .route("/api/v2/test-archives/{cv}", get(archive))
}

/// The largest upload accepted.
pub fn max_upload_bytes() -> usize {
    std::env::var("TERRACE_MAX_UPLOAD_BYTES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_MAX_UPLOAD_BYTES)
}

pub fn upload_router() -> Router<AppState> {
    let limit = max_upload_bytes();
    Router::new()
        .route(&format!("{UPLOAD_PATH}/{{token}}"), put(upload))
        .layer(DefaultBodyLimit::max(limit))
        .layer(RequestBodyLimitLayer::new(limit))
}

pub use crate::documents::config_versions::{
    ANNOTATION_UPLOAD_EXPIRES, ANNOTATION_UPLOAD_SHA256, ANNOTATION_UPLOADING, UPLOAD_PATH,
    UPLOAD_TTL, UPLOADING_STALE, render, status_of,
};
use crate::documents::config_versions::{create_pending, pending_meta};

/// The attributes of a configuration version request (the body may be empty).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct CvAttributes {
    auto_queue_runs: Option<bool>,
    speculative: Option<bool>,
}

impl Typed for CvAttributes {
    const TYPE: &'static str = "configuration-versions";
}

async fn create(
    Authed { state, caller }: Authed,
    Path((org, namespace, name, provider)): Path<TPath>,
    headers: HeaderMap,
    JsonApi(doc): JsonApi<Option<Document<CvAttributes>>>,
) -> Result<Doc, ApiError> {
    let m = locate(
        &state,
        &caller,
        (&org, &namespace, &name, &provider),
        "create",
        "configurationversions",
    )
    .await?;
    let attrs = match doc {
        Some(d) => d.checked()?.attributes,
        None => CvAttributes::default(),
    };
    let auto_queue = attrs.auto_queue_runs.unwrap_or(true);
    let speculative = attrs.speculative.unwrap_or(false);
    let id = new_id(IdKind::ConfigurationVersion);
    let (token, metadata) = pending_meta(&state, m.child_meta(&id))?;
    let cv = ConfigurationVersion {
        metadata,
        spec: ConfigurationVersionSpec {
            ingress_attributes: None,
            module: Some(m.object_name()),
            workspace: None,
            auto_queue_runs: auto_queue,
            speculative,
            source: TestSource::of_api_request(
                headers
                    .get(HEADER_TERRAFORM_INTEGRATION)
                    .and_then(|v| v.to_str().ok()),
            )
            .as_str()
            .to_owned(),
            provisional: false,
        },
        status: None,
    };
    create_pending(&state, &headers, &cv, &id, &token).await
}

/// `GET /configuration-versions/:id`: what clients poll after an upload until `status`
/// is `uploaded` (`get` on the configuration version; 404 otherwise).
async fn show(f: Found<ConfigurationVersion>) -> Doc {
    Doc::ok(render(&f.at.obj, None))
}

fn gone() -> ApiError {
    ApiError::not_found("upload URL not found, expired or already used")
}

/// Checks a tar.gz archive with the rules the runner unpacks it with
/// ([`terrace_crds::archive`]); answers its number of entries, or what is wrong with it.
pub fn validate_archive(mut bytes: &[u8]) -> Result<u64, String> {
    validate_archive_reader(&mut bytes)
}

/// [`validate_archive`] of an archive read as it comes.
pub fn validate_archive_reader(reader: &mut dyn std::io::Read) -> Result<u64, String> {
    terrace_crds::archive::validate_reader(reader, &terrace_crds::archive::ArchiveLimits::default())
        .map(|s| s.files + s.directories + s.symlinks)
        .map_err(|e| e.to_string())
}

/// The check of an upload to `cv`: the archive rules, and for a module version's archive
/// the description of its modules too ([`terrace_crds::registry::doc`]; a file that is
/// not valid HCL refuses it).
fn archive_check(
    cv: &ConfigurationVersion,
) -> impl FnOnce(&mut dyn std::io::Read) -> Result<Option<ModuleDoc>, String> + Send + 'static {
    let describe = cv
        .owner_references()
        .iter()
        .any(|o| o.kind == ModuleVersion::kind(&()));
    move |reader| {
        use terrace_crds::archive::{ArchiveLimits, Keep, validate_keeping};
        use terrace_crds::registry::doc;
        if !describe {
            return validate_archive_reader(reader).map(|_| None);
        }
        let keep = Keep {
            wanted: &doc::wanted,
            budget: doc::WANTED_BYTES,
        };
        let (_, files) = validate_keeping(reader, &ArchiveLimits::default(), &keep)
            .map_err(|e| e.to_string())?;
        doc::describe(&files)
            .map(Some)
            .map_err(|e| format!("the module cannot be read: {e}"))
    }
}

/// The configuration version whose pending upload token is `token`.
fn by_token(state: &AppState, token: &str) -> Option<Arc<ConfigurationVersion>> {
    let sha = sha256_hex(token.as_bytes());
    let idx = state.index.read();
    idx.configuration_versions()
        .iter()
        .find(|cv| cv.annotations().get(ANNOTATION_UPLOAD_SHA256) == Some(&sha))
        .cloned()
}

/// 409 when a run (or, for a module version's archive, a test run) uses configuration
/// version `cv`: its archive may no longer change.
fn not_used_by_a_run(state: &AppState, cv: &ConfigurationVersion) -> Result<(), ApiError> {
    let ns = cv.namespace().unwrap_or_default();
    let name = cv.name_any();
    let idx = state.index.read();
    let user = idx
        .runs()
        .in_namespace(&ns)
        .find(|r| r.spec.configuration_version == name)
        .map(|r| ("run", id_of(r.as_ref())))
        .or_else(|| {
            idx.test_runs()
                .in_namespace(&ns)
                .find(|t| t.spec.configuration_version == name)
                .map(|t| ("test run", id_of(t.as_ref())))
        });
    match user {
        Some((what, id)) => Err(ApiError::conflict(format!(
            "configuration version {} is used by {what} {id}: upload to a new configuration version",
            id_of(cv)
        ))),
        None => Ok(()),
    }
}

/// Whether `cv` is a registry module version's archive (owned by its ModuleVersion).
fn of_module_version(cv: &ConfigurationVersion) -> bool {
    cv.owner_references()
        .iter()
        .any(|o| o.kind == "ModuleVersion")
}

/// Whether `cv`'s upload URL takes another upload once one landed: a workspace's
/// configuration version, and a module version's archive (go-tfe uploads a version
/// twice), until a run or test run uses it. A module test's takes one (SPEC.md A3).
fn reusable(cv: &ConfigurationVersion) -> bool {
    cv.spec.workspace.is_some() || of_module_version(cv)
}

/// The upload of `body` to the configuration version whose upload token is `token`, as
/// its upload URL takes it (a VCS ingress uploads the archive it fetched this way).
pub async fn upload_archive(
    state: &AppState,
    token: &str,
    body: Body,
) -> Result<Response, ApiError> {
    upload(State(state.clone()), Path(token.to_owned()), body).await
}

/// `PUT /api/v2/uploads/v1/object/<token>`. A module test's configuration version takes
/// one upload (SPEC.md A3). A workspace's, and a module version's archive, take a new
/// archive again, through the same URL while it works, until a run (a test run) uses the
/// version (TFE accepts a second PUT, and go-tfe's tests make one): the new archive is
/// stored beside the old one and replaces it only once valid; a refused one leaves the
/// version as it was (422).
async fn upload(
    State(state): State<AppState>,
    Path(token): Path<String>,
    body: Body,
) -> Result<Response, ApiError> {
    let cv = by_token(&state, &token).ok_or_else(gone)?;
    let expired = cv
        .annotations()
        .get(ANNOTATION_UPLOAD_EXPIRES)
        .and_then(|t| t.parse::<jiff::Timestamp>().ok())
        .is_none_or(|t| t < jiff::Timestamp::now());
    let again = reusable(&cv) && cv.usable();
    if expired || !(cv.state() == Ok(ConfigurationVersionState::Pending) || again) {
        return Err(gone());
    }
    if again {
        not_used_by_a_run(&state, &cv)?;
    }
    let ns = cv.namespace().unwrap_or_default();
    let name = cv.name_any();
    let api = write::api::<ConfigurationVersion>(&state, &ns);
    // Claimed before the body is read: of two concurrent PUTs only one streams.
    claim(&api, &cv).await?;
    let result = receive(&state, &api, &cv, again, body).await;
    if reusable(&cv) {
        release(&state, &api, &name).await;
    }
    result
}

/// Streams the archive of an upload claimed on `cv` into the store and records it;
/// `again`: it replaces an archive the version has.
async fn receive(
    state: &AppState,
    api: &kube::Api<ConfigurationVersion>,
    cv: &ConfigurationVersion,
    again: bool,
    body: Body,
) -> Result<Response, ApiError> {
    use crate::ingest::{BodyError, Settled, ingest, record_or_remove, settle};
    let ns = cv.namespace().unwrap_or_default();
    let name = cv.name_any();
    let old = cv.status.as_ref().and_then(|s| s.archive.clone());
    let key = if again {
        format!(
            "configuration-versions/{}-{}",
            id_of(cv),
            jiff::Timestamp::now().as_millisecond()
        )
    } else {
        format!("configuration-versions/{}", id_of(cv))
    };
    let store = crate::blobs::store(state, &ns, cv.controller_owner_ref(&()));
    let upload = store.upload(&key).await;
    // A first upload that fails leaves the version errored, saying why (TFE's); a
    // replacement that fails leaves it as it was.
    let errored = |message: String| {
        let api = api.clone();
        let name = name.clone();
        let state = state.clone();
        async move {
            if again {
                return Ok::<(), ApiError>(());
            }
            let errored = write::patch_status(
                &api,
                &name,
                json!({"status": ConfigurationVersionState::Errored.as_str(), "errorMessage": message}),
            )
            .await?;
            write::wait_seen(&state, &errored).await;
            Ok::<(), ApiError>(())
        }
    };
    let ingested = match ingest(body, upload, archive_check(cv)).await {
        Ok(i) => i,
        Err(e) => {
            let answer = match e {
                BodyError::TooLarge => ApiError::TooLarge(
                    format!("the archive exceeds {} bytes", max_upload_bytes()).into(),
                ),
                BodyError::Unreadable(_) => ApiError::bad_body(e.to_string()),
                BodyError::Check(_) => ApiError::internal("archive validation", e),
            };
            errored(answer.to_string()).await?;
            return Err(answer);
        }
    };
    let (module_doc, stored) = match settle(ingested.upload, ingested.checked).await {
        Ok(done) => done,
        Err(Settled::Refused(message)) if again => {
            return Err(ApiError::invalid(
                "/",
                format!("archive refused: {message}"),
            ));
        }
        Err(Settled::Refused(message)) => {
            errored(message).await?;
            return Ok(StatusCode::OK.into_response());
        }
        Err(Settled::Store(e)) => return Err(crate::blobs::api_error("the archive", e)),
    };
    if again && let Err(e) = not_used_by_a_run(state, cv) {
        // A run took the version while the archive streamed: it keeps the old one.
        let _ = store.delete(&key).await;
        return Err(e);
    }
    let archive = ArchiveRef {
        key: key.clone(),
        size: i64::try_from(stored.size).unwrap_or(i64::MAX),
        sha256: stored.sha256,
    };
    let uploaded = record_or_remove(
        &store,
        &key,
        "an archive",
        write::patch_status(
            api,
            &name,
            json!({"status": ConfigurationVersionState::Uploaded.as_str(), "archive": archive, "uploadedAt": crate::render::now(), "errorMessage": null, "moduleDoc": module_doc}),
        ),
    )
    .await?;
    if let Some(old) = old.filter(|o| o.key != key) {
        match store.delete(&old.key).await {
            Ok(()) | Err(crate::blobs::BlobError::NotFound(_)) => {}
            Err(e) => {
                tracing::warn!(key = %old.key, error = %e, "a replaced archive was not deleted")
            }
        }
    }
    write::wait_seen(state, &uploaded).await;
    Ok(StatusCode::OK.into_response())
}

/// Ends the upload mark of configuration version `name` (its URL takes the next upload),
/// and waits until the index has seen that: a client's next PUT, right after this one's
/// answer, is decided on the index's copy first.
async fn release(state: &AppState, api: &kube::Api<ConfigurationVersion>, name: &str) {
    let patch = json!({"metadata": {"annotations": {ANNOTATION_UPLOADING: null}}});
    match api
        .patch(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
    {
        Ok(released) => write::wait_seen(state, &released).await,
        Err(e) => {
            tracing::warn!(configuration_version = %name, error = %e, "the upload mark was not removed; it lapses on its own")
        }
    }
}

/// Claims the upload token, with a resourceVersion precondition so that of concurrent
/// uploads exactly one proceeds. A module test's token is consumed (its annotations
/// removed), and the same write marks a module's configuration version with
/// `auto-queue-runs` due for its automatic test run. A workspace's and a module
/// version's token stays for another upload ([`reusable`]); the write marks the upload
/// as streaming ([`ANNOTATION_UPLOADING`]; a module version's first one also due for its
/// test run), and a second PUT meanwhile is 409.
async fn claim(
    api: &kube::Api<ConfigurationVersion>,
    cv: &ConfigurationVersion,
) -> Result<(), ApiError> {
    let sha = cv.annotations().get(ANNOTATION_UPLOAD_SHA256).cloned();
    let mut claimed = false;
    let now = jiff::Timestamp::now();
    write::guarded_patch(api, cv.clone(), |current| {
        if sha.is_none() || current.annotations().get(ANNOTATION_UPLOAD_SHA256) != sha.as_ref() {
            return Err(gone());
        }
        if reusable(current) {
            let streaming = current
                .annotations()
                .get(ANNOTATION_UPLOADING)
                .and_then(|t| t.parse::<jiff::Timestamp>().ok())
                .is_some_and(|t| now.duration_since(t) < UPLOADING_STALE);
            if streaming {
                return Err(ApiError::conflict(
                    "another upload to this configuration version is in progress",
                ));
            }
            claimed = true;
            // A module version's first upload marks its archive due for the automatic
            // test run, as a module's single upload does.
            let due =
                (of_module_version(current) && current.spec.auto_queue_runs && !current.usable())
                    .then_some(Marker::Due.as_str());
            let mut annotations = json!({ANNOTATION_UPLOADING: now.to_string()});
            if let Some(d) = due {
                annotations[ANNOTATION_AUTOMATIC_TEST_RUN] = json!(d);
            }
            return Ok(Some(json!({"metadata": {"annotations": annotations}})));
        }
        claimed = true;
        let due = (current.spec.auto_queue_runs && current.spec.module.is_some())
            .then_some(Marker::Due.as_str());
        Ok(Some(json!({"metadata": {
            "annotations": {
                ANNOTATION_UPLOAD_SHA256: null,
                ANNOTATION_UPLOAD_EXPIRES: null,
                ANNOTATION_AUTOMATIC_TEST_RUN: due,
            },
        }})))
    })
    .await
    .map_err(|e| match e {
        ApiError::NotFound(_) => gone(),
        other => other,
    })?;
    if claimed { Ok(()) } else { Err(gone()) }
}

/// Key of the archive token in a run's Secret.
pub const TOKEN_KEY: &str = "token";

/// Secret holding a test run's archive token: the operator's run Secret, named like the
/// run's Pod (`<run>-run`), with the single-use token under `token` (removed once the
/// archive has been served) and the var-file beside it.
pub fn token_secret_name(run_object_name: &str) -> String {
    format!("{run_object_name}-run")
}

async fn archive(
    State(state): State<AppState>,
    Path(cv_id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let unauthorized = || ApiError::Unauthorized("a valid archive token is required".into());
    let presented = crate::auth::bearer_token(&headers)
        .map(str::to_owned)
        .ok_or_else(unauthorized)?;
    let (cv, runs) = {
        let idx = state.index.read();
        let cv = idx
            .configuration_versions()
            .get(&cv_id)
            .cloned()
            .ok_or_else(unauthorized)?;
        let ns = cv.namespace().unwrap_or_default();
        let runs: Vec<String> = idx
            .test_runs()
            .in_namespace(&ns)
            .filter(|r| r.spec.configuration_version == cv.name_any())
            .map(|r| r.name_any())
            .collect();
        (cv, runs)
    };
    let ns = cv.namespace().unwrap_or_default();
    let secrets = write::api::<Secret>(&state, &ns);
    let holds = |s: &Secret| {
        s.data
            .as_ref()
            .and_then(|d| d.get(TOKEN_KEY))
            .is_some_and(|t| constant_time_eq(&t.0, presented.as_bytes()))
    };
    let mut holder = None;
    for run in runs {
        if let Ok(Some(s)) = secrets.get_opt(&token_secret_name(&run)).await
            && holds(&s)
        {
            holder = Some(s);
        }
    }
    let holder = holder.ok_or_else(unauthorized)?;
    // The token is single-use: consumed (removed from the run's Secret, under its
    // resourceVersion, so of two concurrent fetches one wins) before the archive is served.
    let removal = json!({"data": {TOKEN_KEY: null}});
    write::consume(&secrets, holder, holds, removal, unauthorized).await?;
    crate::documents::config_versions::archive_response(&state, &ns, &cv, "archive not found").await
}

#[cfg(test)]
mod tests {
    use k8s_openapi::ByteString;
    use k8s_openapi::api::core::v1::Secret;
    use kube::Api;
    use kube::api::{Patch, PatchParams, PostParams};
    use serde_json::json;

    use std::collections::BTreeMap;

    use super::*;
    use crate::testing::meta;
    use crate::testing::*;

    #[test]
    fn archive_validation() {
        assert_eq!(
            validate_archive(&targz(&[("main.tf", "x"), ("tests/a.tftest.hcl", "")])),
            Ok(2)
        );
        assert!(validate_archive(b"plain text").is_err());
        let mut broken = targz(&[("main.tf", "x")]);
        broken.truncate(broken.len() / 2);
        assert!(validate_archive(&broken).is_err());
        // tar::Builder refuses `..`; write the header name bytes directly.
        let mut b = tar::Builder::new(Vec::new());
        let mut header = tar::Header::new_old();
        header.as_old_mut().name[..7].copy_from_slice(b"../evil");
        header.set_size(1);
        header.set_cksum();
        b.append(&header, &b"x"[..])
            .unwrap_or_else(|e| panic!("{e}"));
        let tar = b.into_inner().unwrap_or_else(|e| panic!("{e}"));
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        std::io::Write::write_all(&mut enc, &tar).unwrap_or_else(|e| panic!("{e}"));
        let evil = enc.finish().unwrap_or_else(|e| panic!("{e}"));
        let err = validate_archive(&evil).err().unwrap_or_default();
        assert!(err.contains("unsafe path"), "{err}");
    }

    /// A module version's upload link reads the same from `GET …/version` as create
    /// answered it, and takes a new archive again (go-tfe's UploadTarGzip uploads twice)
    /// until a test run used the archive; a refused one changes nothing; the first upload
    /// marks it due for its automatic test run (issue 42 §16).
    #[tokio::test]
    async fn a_module_version_link_is_shown_again_and_reusable_until_a_test_run() {
        let h = Mh::with_module().await;
        let (st, doc) = h
            .call(
                "POST",
                "/api/v2/registry-modules/acme/vpc/aws/versions",
                Some(json!({"data": {"type": "registry-module-versions", "attributes": {"version": "1.0.0"}}})),
            )
            .await;
        assert_eq!(st, 201, "{doc}");
        let link = doc["data"]["links"]["upload"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(link.contains("/object/"), "{doc}");
        let read = "/api/v2/organizations/acme/registry-modules/private/acme/vpc/aws/version?module_version=1.0.0";
        let (st, shown) = h.call("GET", read, None).await;
        assert_eq!(st, 200, "{shown}");
        assert_eq!(shown["data"]["links"]["upload"], link.as_str());
        let path = link[link.find("/api/v2/").unwrap_or(0)..].to_owned();
        let cv_of = || {
            h.state
                .index
                .read()
                .configuration_versions()
                .in_namespace(ORG)
                .find(|c| {
                    c.owner_references()
                        .iter()
                        .any(|o| o.kind == "ModuleVersion")
                })
                .cloned()
                .unwrap_or_else(|| panic!("the version's archive"))
        };
        let first = targz(&[("main.tf", "variable \"a\" {}")]);
        assert_eq!(h.upload(&path, first.clone()).await, 200);
        h.wait("uploaded", |i| {
            i.configuration_versions().iter().any(|c| {
                c.state() == Ok(ConfigurationVersionState::Uploaded)
                    && c.owner_references()
                        .iter()
                        .any(|o| o.kind == "ModuleVersion")
            })
        })
        .await;
        assert_eq!(
            cv_of()
                .annotations()
                .get(ANNOTATION_AUTOMATIC_TEST_RUN)
                .map(String::as_str),
            Some("due")
        );
        // The link is still shown, and takes another archive.
        let (_, shown) = h.call("GET", read, None).await;
        assert_eq!(shown["data"]["links"]["upload"], link.as_str());
        let second = targz(&[("main.tf", "variable \"b\" {}")]);
        assert_eq!(h.upload(&path, second.clone()).await, 200);
        h.wait("replaced", |i| {
            i.configuration_versions().iter().any(|c| {
                c.status
                    .as_ref()
                    .and_then(|s| s.archive.as_ref())
                    .is_some_and(|a| a.sha256 == sha256_hex(&second))
            })
        })
        .await;
        assert_eq!(h.upload(&path, b"not a tar.gz".to_vec()).await, 422);
        assert_eq!(
            cv_of()
                .status
                .clone()
                .and_then(|s| s.archive)
                .map(|a| a.sha256),
            Some(sha256_hex(&second))
        );
        // A test run takes the archive: no more uploads.
        let cv = id_of(cv_of().as_ref());
        let (st, run) = h.run(&cv, json!({})).await;
        assert_eq!(st, 201, "{run}");
        h.wait("the test run", |i| {
            i.test_runs().in_namespace(ORG).next().is_some()
        })
        .await;
        assert_eq!(h.upload(&path, first).await, 409);
        // A module test's configuration version keeps its single upload.
        let (_, test_path) = h.cv(false).await;
        assert_eq!(h.upload(&test_path, targz(&[("main.tf", "")])).await, 200);
        assert_eq!(h.upload(&test_path, targz(&[("main.tf", "")])).await, 404);
    }

    /// Create answers a one-time upload URL; the PUT (no auth) stores the archive and
    /// marks the configuration version due for its automatic run, which the API does not
    /// create itself (the operator does, after a grace period); a second PUT is 404; the
    /// URL never shows again.
    #[tokio::test]
    async fn upload_once_and_mark_the_automatic_run_due() {
        let h = Mh::with_module().await;
        let (st, doc) = h
            .call(
                "POST",
                &format!("{T}/test-runs/configuration-versions"),
                None,
            )
            .await;
        assert_eq!(st, 201, "{doc}");
        let attrs = &doc["data"]["attributes"];
        assert_eq!(attrs["auto-queue-runs"], true);
        assert_eq!(attrs["status"], "pending");
        let url = attrs["upload-url"].as_str().unwrap_or_default().to_owned();
        assert!(
            url.starts_with("http://localhost/api/v2/uploads/v1/object/"),
            "{url}"
        );
        let cv = doc["data"]["id"].as_str().unwrap_or_default().to_owned();
        let token = url.rsplit('/').next().unwrap_or_default().to_owned();
        let stored = h
            .state
            .index
            .read()
            .configuration_versions()
            .get(&cv)
            .cloned();
        let stored = stored.unwrap_or_else(|| panic!("cv not indexed"));
        assert!(
            !serde_json::to_string(&*stored)
                .unwrap_or_default()
                .contains(&token)
        );
        let path = format!("{UPLOAD_PATH}/{token}");
        let archive = targz(&[("main.tf", "variable \"x\" {}")]);
        assert_eq!(h.upload(&path, archive.clone()).await, 200);
        assert_eq!(h.upload(&path, archive.clone()).await, 404);
        assert_eq!(
            h.upload(&format!("{UPLOAD_PATH}/nope"), archive.clone())
                .await,
            404
        );
        let cvo = h
            .state
            .index
            .read()
            .configuration_versions()
            .get(&cv)
            .cloned();
        let cvo = cvo.unwrap_or_else(|| panic!("cv not indexed"));
        assert_eq!(cvo.state(), Ok(ConfigurationVersionState::Uploaded));
        assert_eq!(
            cvo.annotations()
                .get(ANNOTATION_AUTOMATIC_TEST_RUN)
                .map(String::as_str),
            Some("due")
        );
        let a = cvo
            .status
            .clone()
            .and_then(|s| s.archive)
            .unwrap_or_default();
        assert_eq!(a.size, archive.len() as i64);
        assert_eq!(a.sha256, sha256_hex(&archive));
        assert!(
            h.state
                .index
                .read()
                .test_runs()
                .in_namespace(ORG)
                .next()
                .is_none(),
            "the API creates no run at upload"
        );
        // Without auto-queue-runs nothing is due.
        let (cv2, path2) = h.cv(false).await;
        assert_eq!(h.upload(&path2, archive).await, 200);
        let cvo = h
            .state
            .index
            .read()
            .configuration_versions()
            .get(&cv2)
            .cloned();
        assert!(cvo.is_some_and(|c| !c.annotations().contains_key(ANNOTATION_AUTOMATIC_TEST_RUN)));
    }

    /// A corrupt archive errors the configuration version with a message (200 to the
    /// client as TFE answers); runs cannot use it (422).
    #[tokio::test]
    async fn corrupt_archive_errors_the_cv() {
        let h = Mh::with_module().await;
        let (cv, path) = h.cv(true).await;
        assert_eq!(h.upload(&path, b"not an archive".to_vec()).await, 200);
        let st = h
            .state
            .index
            .read()
            .configuration_versions()
            .get(&cv)
            .and_then(|c| c.status.clone())
            .unwrap_or_default();
        assert_eq!(st.status.as_deref(), Some("errored"));
        assert!(st.error_message.unwrap_or_default().contains("gzip"));
        assert!(
            h.state
                .index
                .read()
                .test_runs()
                .in_namespace(ORG)
                .next()
                .is_none()
        );
        let (st, doc) = h.run(&cv, json!({})).await;
        assert_eq!(st, 422, "{doc}");
        assert!(doc.to_string().contains("not uploaded"));
    }

    /// Expired URLs answer 404; unknown modules and organizations answer 404 on create;
    /// an upload larger than the global body limit is accepted on this route.
    #[tokio::test]
    async fn expiry_not_found_and_size() {
        let h = Mh::with_module().await;
        let (cv, path) = h.cv(false).await;
        let obj = h
            .state
            .index
            .read()
            .configuration_versions()
            .get(&cv)
            .cloned();
        let name = obj.map(|o| o.name_any()).unwrap_or_default();
        let api: Api<ConfigurationVersion> = Api::namespaced(h.admin.clone(), ORG);
        let patched = api
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {ANNOTATION_UPLOAD_EXPIRES: "2000-01-01T00:00:00Z"}}})),
            )
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        crate::write::wait_seen(&h.state, &patched).await;
        assert_eq!(h.upload(&path, targz(&[("a", "b")])).await, 404);
        for p in [
            "/api/v2/organizations/nope/tests/registry-modules/private/nope/vpc/aws/test-runs/configuration-versions",
            "/api/v2/organizations/acme/tests/registry-modules/private/acme/nope/aws/test-runs/configuration-versions",
        ] {
            assert_eq!(h.call("POST", p, None).await.0, 404, "{p}");
        }
        // 2 MiB of incompressible data: above the global 1 MiB limit.
        let mut x: u32 = 7;
        let big: String = (0..2 * 1024 * 1024)
            .map(|_| {
                x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
                char::from(b'a' + ((x >> 16) % 26) as u8)
            })
            .collect();
        let (cv2, path2) = h.cv(false).await;
        let archive = targz(&[("big.txt", &big)]);
        assert!(archive.len() > 1024 * 1024);
        assert_eq!(h.upload(&path2, archive.clone()).await, 200);
        let st = h
            .state
            .index
            .read()
            .configuration_versions()
            .get(&cv2)
            .and_then(|c| c.status.clone());
        assert_eq!(st.and_then(|s| s.status), Some("uploaded".into()));
    }

    /// The archive endpoint answers the bytes for the token of a run using the cv, and
    /// 401 for a missing or wrong token.
    #[tokio::test]
    async fn test_pod_fetches_the_archive_with_its_token() {
        let h = Mh::with_module().await;
        let cv = h.uploaded_cv().await;
        let (st, doc) = h.run(&cv, json!({})).await;
        assert_eq!(st, 201, "{doc}");
        let run_id = doc["data"]["id"].as_str().unwrap_or_default().to_owned();
        let run_name = run_id.to_ascii_lowercase();
        let secrets: Api<Secret> = Api::namespaced(h.admin.clone(), ORG);
        let mut s = Secret {
            metadata: meta(&token_secret_name(&run_name), Some(ORG), &[]),
            ..Default::default()
        };
        s.data = Some(BTreeMap::from([(
            "token".to_owned(),
            ByteString(b"s3cret".to_vec()),
        )]));
        secrets
            .create(&PostParams::default(), &s)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let path = format!("/api/v2/test-archives/{cv}");
        let (st, hdrs, body) = h
            .raw("GET", &path, &[("authorization", "Bearer s3cret")], vec![])
            .await;
        assert_eq!(st, 200);
        assert_eq!(
            hdrs.get("content-type").map(String::as_str),
            Some("application/gzip")
        );
        assert_eq!(validate_archive(&body), Ok(1));
        for auth in [vec![], vec![("authorization", "Bearer wrong")]] {
            assert_eq!(h.raw("GET", &path, &auth, vec![]).await.0, 401);
        }
        // Single-use: the same token a second time is refused.
        assert_eq!(
            h.raw("GET", &path, &[("authorization", "Bearer s3cret")], vec![])
                .await
                .0,
            401
        );
        assert_eq!(
            h.raw(
                "GET",
                "/api/v2/test-archives/cv-nope",
                &[("authorization", "Bearer s3cret")],
                vec![]
            )
            .await
            .0,
            401
        );
    }

    /// `links.self` of a configuration version answers: clients poll it after an upload.
    #[tokio::test]
    async fn configuration_versions_are_readable_by_id() {
        let h = Mh::with_module().await;
        let (id, path) = h.cv(false).await;
        let (st, doc) = h
            .call("GET", &format!("/api/v2/configuration-versions/{id}"), None)
            .await;
        assert_eq!(
            (st, doc["data"]["attributes"]["status"].as_str()),
            (200, Some("pending")),
            "{doc}"
        );
        assert!(
            doc["data"]["attributes"].get("upload-url").is_none(),
            "never shown again"
        );
        assert_eq!(h.upload(&path, targz(&[("main.tf", "")])).await, 200);
        let (_, doc) = h
            .call("GET", &format!("/api/v2/configuration-versions/{id}"), None)
            .await;
        assert_eq!(doc["data"]["attributes"]["status"], "uploaded");
        assert_eq!(
            h.call("GET", "/api/v2/configuration-versions/cv-nope", None)
                .await
                .0,
            404
        );
        let nobody = h.token_with_role(None).await;
        assert_eq!(
            h.call_as(
                &nobody,
                "GET",
                &format!("/api/v2/configuration-versions/{id}"),
                None
            )
            .await
            .0,
            404
        );
    }

    /// An archive the runner would refuse is refused at upload: the configuration version
    /// errors with the reason, and no run is queued on it.
    #[tokio::test]
    async fn archives_the_runner_refuses_error_at_upload() {
        let h = Mh::with_module().await;
        let mut b = tar::Builder::new(Vec::new());
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Symlink);
        header.set_size(0);
        header
            .set_link_name("../../etc/passwd")
            .unwrap_or_else(|e| panic!("{e}"));
        header.set_cksum();
        b.append_data(&mut header, "escape", &[][..])
            .unwrap_or_else(|e| panic!("{e}"));
        let tar = b.into_inner().unwrap_or_else(|e| panic!("{e}"));
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        std::io::Write::write_all(&mut enc, &tar).unwrap_or_else(|e| panic!("{e}"));
        let evil = enc.finish().unwrap_or_else(|e| panic!("{e}"));
        let (id, path) = h.cv(true).await;
        assert_eq!(h.upload(&path, evil).await, 200);
        let (_, doc) = h
            .call("GET", &format!("/api/v2/configuration-versions/{id}"), None)
            .await;
        assert_eq!(doc["data"]["attributes"]["status"], "errored", "{doc}");
        assert!(
            doc["data"]["attributes"]["error-message"]
                .as_str()
                .is_some_and(|m| m.contains("points outside")),
            "{doc}"
        );
        let (_, runs) = h.call("GET", &format!("{T}/test-runs"), None).await;
        assert_eq!(runs["data"], json!([]));
    }
}
