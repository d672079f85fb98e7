//! The parts every Pod the operator starts is built from, shared by the test Pod of a
//! TestRun ([`crate::testpod`]) and the plan and apply Pods of a Run
//! ([`crate::run::pod`]): object metadata owned by the run, the labels, volumes and
//! mounts, the `install-terrace` init container, the `engine` container, the engine's
//! environment and the Pod spec with the organization's (and agent pool's) Pod template.
//! The Pod contract's names and paths are its constants (also exported by
//! [`crate::testpod`]).

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{
    Capabilities, Container, EmptyDirVolumeSource, EnvVar, EnvVarSource, PodSecurityContext,
    PodSpec, SeccompProfile, Secret, SecretKeySelector, SecurityContext, Volume, VolumeMount,
};
use kube::api::ObjectMeta;
use kube::{Resource, ResourceExt};
use terrace_crds::common::SecretKeyRef;
use terrace_crds::constants::{LABEL_MANAGED_BY, LABEL_ORGANIZATION, MANAGED_BY};
use terrace_crds::{PodTemplateOverrides, TestRunSettings};

use crate::{Error, Settings};

/// Name of the engine container (its termination message is the runner's report).
pub const ENGINE_CONTAINER: &str = "engine";
/// Name of the init container copying the terrace binary.
pub const INSTALL_CONTAINER: &str = "install-terrace";
/// Where the configuration is unpacked and the engine runs.
pub const WORKSPACE_DIR: &str = "/workspace";
/// Where the terrace binary is copied.
pub const TOOLS_DIR: &str = "/terrace";
/// Termination message path of the engine container.
pub const TERMINATION_MESSAGE_PATH: &str = "/dev/termination-log";
/// The engine's home: an emptyDir, so an engine image whose user has no writable home
/// (the official terraform and OpenTofu images run as root, and here as 65532) works.
pub const HOME_DIR: &str = "/home/terrace";
/// The user and group every container runs as by default (the terrace image's, as its
/// Dockerfile says), and the `fsGroup` that makes the run's Secret readable to them.
pub const POD_USER: i64 = 65532;
/// Environment of every engine: no update checks (the Pod may have no way out), no
/// prompts, automation wording, a writable home. A module test variable of the same name
/// wins.
pub const ENGINE_ENV: [(&str, &str); 4] = [
    ("CHECKPOINT_DISABLE", "1"),
    ("TF_IN_AUTOMATION", "1"),
    ("TF_INPUT", "0"),
    ("HOME", HOME_DIR),
];

/// Metadata of an object owned (controller reference) by `owner`, in its namespace;
/// `what` names the owner in the error of one without a uid.
pub(crate) fn owned_meta<K: Resource<DynamicType = ()>>(
    owner: &K,
    what: &str,
    name: String,
    labels: BTreeMap<String, String>,
) -> Result<ObjectMeta, Error> {
    let owner_ref = owner
        .controller_owner_ref(&())
        .ok_or_else(|| Error::Invalid(format!("the {what} has no uid")))?;
    Ok(ObjectMeta {
        name: Some(name),
        namespace: owner.namespace(),
        labels: Some(labels),
        owner_references: Some(vec![owner_ref]),
        ..Default::default()
    })
}

/// The labels of a run's Pods and Secret: the run's ID under `id_label`, its
/// organization and the managed-by label.
pub(crate) fn labels(id_label: &str, id: &str, organization: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (id_label.to_owned(), id.to_owned()),
        (LABEL_ORGANIZATION.to_owned(), organization.to_owned()),
        (LABEL_MANAGED_BY.to_owned(), MANAGED_BY.to_owned()),
    ])
}

/// Metadata of a run's Pod: [`owned_meta`] with the template's labels under `labels`
/// (ours win), the template's annotations and the `finalizer`.
pub(crate) fn pod_meta<K: Resource<DynamicType = ()>>(
    owner: &K,
    what: &str,
    name: String,
    labels: BTreeMap<String, String>,
    overrides: &PodTemplateOverrides,
    finalizer: &str,
) -> Result<ObjectMeta, Error> {
    // Our labels win over the organization's extra labels.
    let mut all = overrides.labels.clone();
    all.extend(labels);
    let mut meta = owned_meta(owner, what, name, all)?;
    meta.finalizers = Some(vec![finalizer.to_owned()]);
    if !overrides.annotations.is_empty() {
        meta.annotations = Some(overrides.annotations.clone());
    }
    Ok(meta)
}

/// An `Opaque` Secret of `data`.
pub(crate) fn opaque_secret(
    metadata: ObjectMeta,
    data: impl IntoIterator<Item = (&'static str, Vec<u8>)>,
) -> Secret {
    Secret {
        metadata,
        data: Some(
            data.into_iter()
                .map(|(k, v)| (k.to_owned(), ByteString(v)))
                .collect(),
        ),
        type_: Some("Opaque".to_owned()),
        ..Default::default()
    }
}

/// A volume mount.
pub(crate) fn mount(name: &str, path: &str, read_only: bool) -> VolumeMount {
    VolumeMount {
        name: name.to_owned(),
        mount_path: path.to_owned(),
        read_only: read_only.then_some(true),
        ..Default::default()
    }
}

/// An emptyDir volume.
pub(crate) fn empty_dir(name: &str) -> Volume {
    Volume {
        name: name.to_owned(),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Default::default()
    }
}

/// Where the `install-terrace` init container puts the terrace binary.
pub(crate) fn terrace_binary() -> String {
    format!("{TOOLS_DIR}/terrace")
}

/// The init container `install-terrace` (the terrace image): copies the terrace binary
/// to [`terrace_binary`] in the `tools` volume.
pub(crate) fn install_container(settings: &Settings) -> Container {
    Container {
        name: INSTALL_CONTAINER.to_owned(),
        image: Some(settings.terrace_image.clone()),
        command: Some(vec![
            settings.terrace_binary.clone(),
            "runner".to_owned(),
            "install".to_owned(),
            terrace_binary(),
        ]),
        volume_mounts: Some(vec![mount("tools", TOOLS_DIR, false)]),
        termination_message_policy: Some("FallbackToLogsOnError".to_owned()),
        ..Default::default()
    }
}

/// The engine image configured for the organization's runs, else the operator's.
pub(crate) fn configured_engine_image<'a>(
    org_settings: &'a TestRunSettings,
    settings: &'a Settings,
) -> &'a str {
    org_settings
        .engine_image
        .as_deref()
        .filter(|i| !i.is_empty())
        .unwrap_or(&settings.engine_image)
}

/// The container `engine`: `command` in [`WORKSPACE_DIR`], its termination message in
/// [`TERMINATION_MESSAGE_PATH`], the template's resources.
pub(crate) fn engine_container(
    image: String,
    command: Vec<String>,
    env: Vec<EnvVar>,
    overrides: &PodTemplateOverrides,
    mounts: Vec<VolumeMount>,
) -> Container {
    Container {
        name: ENGINE_CONTAINER.to_owned(),
        image: Some(image),
        command: Some(command),
        working_dir: Some(WORKSPACE_DIR.to_owned()),
        env: Some(env),
        resources: overrides.resources.clone(),
        volume_mounts: Some(mounts),
        termination_message_path: Some(TERMINATION_MESSAGE_PATH.to_owned()),
        termination_message_policy: Some("File".to_owned()),
        ..Default::default()
    }
}

/// An environment variable of the engine: `value`, or the Secret key `value_from`
/// through `secretKeyRef`.
pub(crate) fn env_var(name: String, value: &str, value_from: Option<&SecretKeyRef>) -> EnvVar {
    match value_from {
        Some(from) => EnvVar {
            name,
            value_from: Some(EnvVarSource {
                secret_key_ref: Some(SecretKeySelector {
                    name: from.name.clone(),
                    key: from.key.clone(),
                    optional: Some(false),
                }),
                ..Default::default()
            }),
            ..Default::default()
        },
        None => EnvVar {
            name,
            value: Some(value.to_owned()),
            ..Default::default()
        },
    }
}

/// The whole environment of the engine: [`ENGINE_ENV`], then `own`, which wins over it.
pub(crate) fn with_engine_env(own: Vec<EnvVar>) -> Vec<EnvVar> {
    let mut env: Vec<EnvVar> = ENGINE_ENV
        .iter()
        .filter(|(k, _)| !own.iter().any(|m| m.name == *k))
        .map(|(k, v)| EnvVar {
            name: (*k).to_owned(),
            value: Some((*v).to_owned()),
            ..Default::default()
        })
        .collect();
    env.extend(own);
    env
}

/// The Pod `securityContext` terrace gives its Pods unless a template sets one: Pod
/// Security `restricted` (non-root, `RuntimeDefault` seccomp), user and group
/// [`POD_USER`], and `fsGroup` [`POD_USER`] so the run's Secret (0440) is readable.
pub fn default_pod_security() -> PodSecurityContext {
    PodSecurityContext {
        run_as_non_root: Some(true),
        run_as_user: Some(POD_USER),
        run_as_group: Some(POD_USER),
        fs_group: Some(POD_USER),
        seccomp_profile: Some(SeccompProfile {
            type_: "RuntimeDefault".to_owned(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Every container's `securityContext` unless a template sets one: no privilege
/// escalation, no capability, a read-only root filesystem (the engine writes only to its
/// volumes: the workspace, its home and `/tmp`).
pub fn default_container_security() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".to_owned()]),
            ..Default::default()
        }),
        read_only_root_filesystem: Some(true),
        run_as_non_root: Some(true),
        ..Default::default()
    }
}

/// The spec of a run's Pod: never restarted, the template's service account, node
/// selector and tolerations; the template's security contexts (else terrace's
/// restricted ones) and image pull policy (else the operator's) on every container;
/// `/tmp` and the engine's home on emptyDirs, as the root filesystem is read-only.
pub(crate) fn pod_spec(
    overrides: &PodTemplateOverrides,
    settings: &Settings,
    mut init_containers: Vec<Container>,
    mut engine: Container,
    mut volumes: Vec<Volume>,
) -> PodSpec {
    let service_account = overrides
        .service_account_name
        .clone()
        .filter(|s| !s.is_empty());
    let policy = overrides
        .image_pull_policy
        .unwrap_or(settings.pod_image_pull_policy);
    let container_security = overrides
        .container_security_context
        .clone()
        .unwrap_or_else(default_container_security);
    volumes.push(empty_dir("tmp"));
    volumes.push(empty_dir("home"));
    engine
        .volume_mounts
        .get_or_insert_with(Vec::new)
        .push(mount("home", HOME_DIR, false));
    for c in init_containers
        .iter_mut()
        .chain(std::iter::once(&mut engine))
    {
        c.image_pull_policy = Some(policy.as_str().to_owned());
        c.security_context = Some(container_security.clone());
        c.volume_mounts
            .get_or_insert_with(Vec::new)
            .push(mount("tmp", "/tmp", false));
    }
    PodSpec {
        restart_policy: Some("Never".to_owned()),
        security_context: Some(
            overrides
                .security_context
                .clone()
                .unwrap_or_else(default_pod_security),
        ),
        init_containers: Some(init_containers),
        containers: vec![engine],
        volumes: Some(volumes),
        // The engine needs no Kubernetes API access unless the organization picked an
        // account on purpose (e.g. for cloud workload identity).
        automount_service_account_token: service_account.is_none().then_some(false),
        service_account_name: service_account,
        node_selector: (!overrides.node_selector.is_empty())
            .then(|| overrides.node_selector.clone()),
        tolerations: (!overrides.tolerations.is_empty()).then(|| overrides.tolerations.clone()),
        ..Default::default()
    }
}

/// Whether the cluster's answer `code` to a Pod create refuses it for good: the request
/// is invalid (400, 422: a template the API server does not accept) or forbidden (403:
/// an admission plugin such as Pod Security, a quota). Retrying changes nothing; the run
/// errors at once with the cluster's words.
pub fn refused_for_good(code: u16) -> bool {
    matches!(code, 400 | 403 | 422)
}

/// The prefix of the status message of a run whose Pod waits for a node.
pub const WAITING_FOR_NODE: &str = "waiting for a node";
/// The prefix of the status message of a run whose Pod waits for an image the kubelet
/// could not pull yet (it retries).
pub const WAITING_FOR_IMAGE: &str = "waiting for an image";

/// Whether a run's message says what its Pod waits for (and is cleared once it no
/// longer does).
pub fn is_wait_message(m: &str) -> bool {
    m.starts_with(WAITING_FOR_NODE) || m.starts_with(WAITING_FOR_IMAGE)
}

/// Where a run keeps the first thing its Pod waited for (`waitNote`), and whether it has
/// one already.
#[derive(Clone, Copy, Debug)]
pub struct WaitNote {
    /// The status field holding `waitNote`: `None` for the status itself (test runs),
    /// `Some("plan")` / `Some("apply")` for a run's phase.
    pub under: Option<&'static str>,
    /// The note is written already (it is never rewritten: the log starts with it).
    pub written: bool,
}

/// Shows in a run's (or test run's) `status.message` what its Pod waits for (`waiting`:
/// "waiting for a node: …", see [`crate::testrun::observe::PodState::waiting`]), or clears
/// that message once the Pod no longer waits. The run's state stays; only the message
/// changes, so `kubectl get` and the API say why a run shows no progress. `current` is
/// the run's message now. Once the Pod has waited a while (`waited`, see
/// [`crate::testrun::observe::WAIT_NOTE_AFTER`]), the message is also kept as the
/// `waitNote` of `note`, which the API server serves as the first line of the log the CLI
/// reads.
pub async fn note_waiting<K>(
    client: &kube::Client,
    run: &K,
    current: Option<&str>,
    waiting: Option<&str>,
    waited: Option<&str>,
    note: WaitNote,
) -> Result<(), Error>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned,
{
    let wanted = match waiting {
        Some(w) => Some(w),
        None if current.is_some_and(is_wait_message) => None,
        None => return Ok(()),
    };
    let first = waited.filter(|_| !note.written);
    if current == wanted && first.is_none() {
        return Ok(());
    }
    let mut status = serde_json::json!({"message": wanted});
    if let Some(w) = first {
        match note.under {
            Some(phase) => status[phase] = serde_json::json!({"waitNote": w}),
            None => status["waitNote"] = serde_json::json!(w),
        }
    }
    patch_status_guarded(client, run, status).await?;
    Ok(())
}

/// A merge patch of `status` under the object's resourceVersion; false (nothing written)
/// when the object changed meanwhile (409: the next reconcile sees the change).
pub async fn patch_status_guarded<K>(
    client: &kube::Client,
    obj: &K,
    status: serde_json::Value,
) -> Result<bool, Error>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned,
{
    use kube::api::{Api, Patch, PatchParams};
    let api: Api<K> = Api::namespaced(client.clone(), &obj.namespace().unwrap_or_default());
    let body = serde_json::json!({"metadata": {"resourceVersion": obj.resource_version()},
        "status": status});
    match api
        .patch_status(
            &obj.name_any(),
            &PatchParams::default(),
            &Patch::Merge(body),
        )
        .await
    {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
        Err(e) => Err(e.into()),
    }
}
