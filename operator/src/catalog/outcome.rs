//! What the catalog controllers decide, as pure functions: the kstatus outcome of an
//! object ([`derive_outcome`]), when to look at it again ([`recheck_after`]), what of its
//! status they own ([`StoredStatus`], [`status_apply_body`]) and which objects an event
//! of another kind concerns ([`affected_by_organization`], [`variables_of_module`]).

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::ResourceExt;
use kube::api::{ApiResource, DynamicObject};
use kube::runtime::reflector::ObjectRef;
use serde::Deserialize;
use serde_json::{Map, Value, json};
use terrace_crds::constants::{CONDITION_READY, LABEL_ORGANIZATION};
use terrace_crds::{ConfigurationVersionState, RegistryModule};

use crate::conditions::{
    self, Outcome, REASON_MODULE_NOT_FOUND, REASON_ORGANIZATION_NOT_FOUND, REASON_UPLOAD_ERRORED,
    REASON_WAITING_FOR_MODULE, REASON_WAITING_FOR_UPLOAD,
};
use crate::identity::Identity;

/// Recheck interval of objects in a namespace no Organization owns (yet). Organization
/// events trigger a recheck at once; this catches the Organization cache lagging behind
/// the watch that triggered it.
pub const ORPHAN_RECHECK: Duration = Duration::from_secs(15);
/// Recheck interval of objects waiting for something that happens by itself.
pub const PROGRESS_RECHECK: Duration = Duration::from_secs(5);
/// Recheck interval of TestVariables naming a missing module (module events trigger a
/// recheck at once).
pub const MISSING_MODULE_RECHECK: Duration = Duration::from_secs(60);

/// What a catalog controller reports in a kind's status besides `status.id`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConditionPolicy {
    /// Another controller owns the kind's conditions (TestRun): `status.id` only.
    External,
    /// Ready once the object has its ID and an Organization owns its namespace.
    Identity,
    /// As [`ConditionPolicy::Identity`], and the RegistryModule named in `spec.module`
    /// exists with an ID (TestVariable).
    Module,
    /// As [`ConditionPolicy::Identity`], following the upload state the API server
    /// writes in `status.status` (ConfigurationVersion).
    Upload,
}

/// What a TestVariable's `spec.module` turned out to be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ModuleLookup {
    /// The RegistryModule exists; `id` is its ID label when that is a valid module ID.
    Found { object: String, id: Option<String> },
    /// No RegistryModule of that name in the namespace.
    Missing { object: String },
}

/// The upload state the API server keeps in a ConfigurationVersion's status.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Upload<'a> {
    /// `status.status`: a [`ConfigurationVersionState`] (absent before the API server's
    /// first write, or for a ConfigurationVersion applied with kubectl).
    pub state: Option<&'a str>,
    /// `status.errorMessage`.
    pub error_message: Option<&'a str>,
}

/// What one reconcile found about an object, as [`derive_outcome`] needs it.
#[derive(Clone, Debug)]
pub struct Observed<'a> {
    /// The object's kind (`Project`, `TestVariable`…), for messages.
    pub kind: &'a str,
    /// The object's namespace.
    pub namespace: &'a str,
    /// The object's identity after [`crate::identity::ensure_identity`].
    pub identity: &'a Identity,
    /// A TestVariable's module ([`ConditionPolicy::Module`]).
    pub module: Option<&'a ModuleLookup>,
    /// A ConfigurationVersion's upload state ([`ConditionPolicy::Upload`]).
    pub upload: Option<Upload<'a>>,
}

/// The kstatus outcome of an object of the catalog's kinds. Pure.
///
/// In order: no Organization owning the namespace stalls it (`OrganizationNotFound`);
/// a TestVariable whose module does not exist stalls (`ModuleNotFound`) and one whose
/// module has no ID yet is reconciling (`WaitingForModule`); a ConfigurationVersion is
/// reconciling until its archive is uploaded (`WaitingForUpload`), stalled when the upload
/// errored (`UploadErrored`, with the API server's error message) and Ready once uploaded
/// (or archived); everything else with an ID is Ready (`Reconciled`).
pub fn derive_outcome(o: &Observed<'_>) -> Outcome {
    let (kind, ns, id) = (o.kind, o.namespace, o.identity.id.as_str());
    if !o.identity.organization_found {
        return Outcome::stalled(
            REASON_ORGANIZATION_NOT_FOUND,
            format!("no Organization owns namespace {ns}"),
        );
    }
    let org = o.identity.organization.as_deref().unwrap_or_default();
    match o.module {
        Some(ModuleLookup::Missing { object }) => {
            return Outcome::stalled(
                REASON_MODULE_NOT_FOUND,
                format!("RegistryModule {object:?} not found in namespace {ns}"),
            );
        }
        Some(ModuleLookup::Found { object, id: None }) => {
            return Outcome::progressing(
                REASON_WAITING_FOR_MODULE,
                format!("waiting for RegistryModule {object} to get an ID"),
            );
        }
        Some(ModuleLookup::Found {
            object,
            id: Some(module_id),
        }) => {
            return Outcome::Ready {
                message: format!(
                    "{kind} {id} of RegistryModule {object} ({module_id}) in organization {org}"
                ),
            };
        }
        None => {}
    }
    if let Some(upload) = o.upload {
        use ConfigurationVersionState as S;
        return match S::of(upload.state) {
            Ok(S::Errored) => Outcome::stalled(
                REASON_UPLOAD_ERRORED,
                upload
                    .error_message
                    .filter(|m| !m.is_empty())
                    .unwrap_or("the uploaded archive was rejected")
                    .to_owned(),
            ),
            Ok(state @ (S::Uploaded | S::Archived)) => Outcome::Ready {
                message: format!("{kind} {id} is {state}"),
            },
            Ok(S::Pending) | Err(_) => Outcome::progressing(
                REASON_WAITING_FOR_UPLOAD,
                format!("{kind} {id} is waiting for its configuration archive to be uploaded"),
            ),
        };
    }
    Outcome::Ready {
        message: format!("{kind} {id} in organization {org}"),
    }
}

/// When to look at an object again after reaching `outcome` (None: on its next change).
pub fn recheck_after(outcome: &Outcome) -> Option<Duration> {
    match outcome {
        Outcome::Ready { .. } => None,
        // The API server's status write (the upload) is a change of the object.
        Outcome::Progressing { reason, .. } if reason == REASON_WAITING_FOR_UPLOAD => None,
        Outcome::Progressing { .. } => Some(PROGRESS_RECHECK),
        Outcome::Stalled { reason, .. } if reason == REASON_ORGANIZATION_NOT_FOUND => {
            Some(ORPHAN_RECHECK)
        }
        Outcome::Stalled { reason, .. } if reason == REASON_MODULE_NOT_FOUND => {
            Some(MISSING_MODULE_RECHECK)
        }
        Outcome::Stalled { .. } => None,
    }
}

/// The status fields the catalog controllers read back from an object.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StoredStatus {
    #[serde(default)]
    pub id: Option<String>,
    #[serde(default)]
    pub observed_generation: Option<i64>,
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// A ConfigurationVersion's upload state (the API server's).
    #[serde(default)]
    pub status: Option<String>,
    /// A ConfigurationVersion's upload error (the API server's).
    #[serde(default)]
    pub error_message: Option<String>,
}

impl StoredStatus {
    /// The status of `obj`; what cannot be read counts as absent (rewritten then).
    pub fn of(obj: &DynamicObject) -> Self {
        let Some(status) = obj.data.get("status") else {
            return Self::default();
        };
        serde_json::from_value(status.clone()).unwrap_or_else(|_| Self {
            id: status.get("id").and_then(Value::as_str).map(str::to_owned),
            ..Self::default()
        })
    }

    /// Whether the stored status already shows `id`, `conditions` and `generation`.
    pub fn shows(
        &self,
        id: Option<&str>,
        conditions: &[Condition],
        generation: Option<i64>,
    ) -> bool {
        self.id.as_deref() == id
            && self.observed_generation == generation
            && self.conditions == conditions
    }
}

/// The server-side apply body of the fields the catalog controllers own.
pub fn status_apply_body(
    resource: &ApiResource,
    id: Option<&str>,
    conditions: &[Condition],
    generation: Option<i64>,
) -> Value {
    let mut status = Map::new();
    if let Some(id) = id {
        status.insert("id".into(), json!(id));
    }
    if let Some(g) = generation {
        status.insert("observedGeneration".into(), json!(g));
    }
    status.insert("conditions".into(), json!(conditions));
    json!({"apiVersion": resource.api_version, "kind": resource.kind, "status": status})
}

/// Objects of namespace `ns` (among `objects`, of kind `resource`) whose verdict an event
/// of Organization `org` (owning `ns`) may change: those not Ready, or not labelled with
/// `org`. Ready objects of the organization stay untouched, so an Organization's status
/// write does not reconcile every object of its namespace.
pub fn affected_by_organization(
    objects: &[Arc<DynamicObject>],
    resource: &ApiResource,
    ns: &str,
    org: &str,
) -> Vec<ObjectRef<DynamicObject>> {
    objects
        .iter()
        .filter(|o| o.metadata.namespace.as_deref() == Some(ns))
        .filter(|o| {
            o.labels().get(LABEL_ORGANIZATION).map(String::as_str) != Some(org)
                || !conditions::is_true(&StoredStatus::of(o).conditions, CONDITION_READY)
        })
        .map(|o| ObjectRef::from_obj_with(o.as_ref(), resource.clone()))
        .collect()
}

/// The TestVariables (among `objects`, of kind `resource`) naming `module` in
/// `spec.module`: their verdict changes when the module appears, gets its ID or goes.
pub fn variables_of_module(
    objects: &[Arc<DynamicObject>],
    resource: &ApiResource,
    module: &RegistryModule,
) -> Vec<ObjectRef<DynamicObject>> {
    let name = module.metadata.name.as_deref();
    objects
        .iter()
        .filter(|o| o.metadata.namespace == module.metadata.namespace)
        .filter(|o| o.data.pointer("/spec/module").and_then(Value::as_str) == name)
        .map(|o| ObjectRef::from_obj_with(o.as_ref(), resource.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conditions::kstatus_conditions;
    use k8s_openapi::jiff::Timestamp;
    use kube::api::ObjectMeta;
    use terrace_crds::constants::{CONDITION_RECONCILING, CONDITION_STALLED};
    use terrace_crds::{ConfigurationVersion, TestVariable};

    fn identity(found: bool) -> Identity {
        Identity {
            id: "prj-0123456789abcdef".into(),
            organization: found.then(|| "acme".to_owned()),
            organization_found: found,
        }
    }

    fn observed<'a>(
        identity: &'a Identity,
        module: Option<&'a ModuleLookup>,
        upload: Option<Upload<'a>>,
    ) -> Observed<'a> {
        Observed {
            kind: "Project",
            namespace: "acme",
            identity,
            module,
            upload,
        }
    }

    fn stalled_reason(o: &Outcome) -> Option<&str> {
        match o {
            Outcome::Stalled { reason, .. } => Some(reason),
            _ => None,
        }
    }

    fn progressing_reason(o: &Outcome) -> Option<&str> {
        match o {
            Outcome::Progressing { reason, .. } => Some(reason),
            _ => None,
        }
    }

    /// Copies kstatus: an object with its ID in a namespace an Organization owns is Ready;
    /// without an owning Organization it is Stalled (only creating one helps), whatever
    /// else is true.
    #[test]
    fn identity_kinds_are_ready_or_stalled_without_organization() {
        let id = identity(true);
        let o = derive_outcome(&observed(&id, None, None));
        assert!(
            matches!(&o, Outcome::Ready { message } if message.contains("prj-0123456789abcdef"))
        );
        let orphan = identity(false);
        let missing = ModuleLookup::Missing { object: "m".into() };
        for o in [
            derive_outcome(&observed(&orphan, None, None)),
            derive_outcome(&observed(&orphan, Some(&missing), None)),
            derive_outcome(&observed(&orphan, None, Some(Upload::default()))),
        ] {
            assert_eq!(stalled_reason(&o), Some(REASON_ORGANIZATION_NOT_FOUND));
            assert!(o.message().contains("namespace acme"), "{o:?}");
        }
    }

    /// A test variable needs its module: missing stalls, without an ID it waits, with an
    /// ID it is Ready and names it.
    #[test]
    fn test_variables_follow_their_module() {
        let id = identity(true);
        let missing = ModuleLookup::Missing {
            object: "net".into(),
        };
        let o = derive_outcome(&observed(&id, Some(&missing), None));
        assert_eq!(stalled_reason(&o), Some(REASON_MODULE_NOT_FOUND));
        assert!(o.message().contains("\"net\""));
        let no_id = ModuleLookup::Found {
            object: "net".into(),
            id: None,
        };
        let o = derive_outcome(&observed(&id, Some(&no_id), None));
        assert_eq!(progressing_reason(&o), Some(REASON_WAITING_FOR_MODULE));
        let found = ModuleLookup::Found {
            object: "net".into(),
            id: Some("mod-0123456789abcdef".into()),
        };
        let o = derive_outcome(&observed(&id, Some(&found), None));
        assert!(
            matches!(&o, Outcome::Ready { message } if message.contains("mod-0123456789abcdef"))
        );
    }

    /// Copies TFE's configuration-version states: pending (or no state yet) waits for the
    /// upload, errored stalls with the API server's message, uploaded and archived are
    /// Ready.
    #[test]
    fn configuration_versions_follow_the_upload_state() {
        let id = identity(true);
        let up = |state, error_message| Upload {
            state,
            error_message,
        };
        for state in [None, Some("pending")] {
            let o = derive_outcome(&observed(&id, None, Some(up(state, None))));
            assert_eq!(progressing_reason(&o), Some(REASON_WAITING_FOR_UPLOAD));
            assert_eq!(
                recheck_after(&o),
                None,
                "the upload is a change of the object"
            );
        }
        let o = derive_outcome(&observed(
            &id,
            None,
            Some(up(
                Some("errored"),
                Some("the archive is not gzip-compressed"),
            )),
        ));
        assert_eq!(stalled_reason(&o), Some(REASON_UPLOAD_ERRORED));
        assert_eq!(o.message(), "the archive is not gzip-compressed");
        let o = derive_outcome(&observed(&id, None, Some(up(Some("errored"), Some("")))));
        assert_eq!(o.message(), "the uploaded archive was rejected");
        for state in ["uploaded", "archived"] {
            let o = derive_outcome(&observed(&id, None, Some(up(Some(state), None))));
            assert!(matches!(&o, Outcome::Ready { message } if message.ends_with(state)));
        }
    }

    /// Ready objects and errored uploads wait for a change; orphans, missing modules and
    /// waits that resolve by themselves are looked at again.
    #[test]
    fn rechecks_follow_the_outcome() {
        let ready = Outcome::Ready { message: "".into() };
        assert_eq!(recheck_after(&ready), None);
        assert_eq!(
            recheck_after(&Outcome::stalled(REASON_UPLOAD_ERRORED, "")),
            None
        );
        assert_eq!(
            recheck_after(&Outcome::stalled(REASON_ORGANIZATION_NOT_FOUND, "")),
            Some(ORPHAN_RECHECK)
        );
        assert_eq!(
            recheck_after(&Outcome::stalled(REASON_MODULE_NOT_FOUND, "")),
            Some(MISSING_MODULE_RECHECK)
        );
        assert_eq!(
            recheck_after(&Outcome::progressing(REASON_WAITING_FOR_MODULE, "")),
            Some(PROGRESS_RECHECK)
        );
    }

    fn object(ns: &str, name: &str, status: Value, labels: &[(&str, &str)]) -> DynamicObject {
        let ar = ApiResource::erase::<TestVariable>(&());
        let mut o = DynamicObject::new(name, &ar).within(ns);
        o.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        );
        o.data = json!({"spec": {"module": "net"}, "status": status});
        o
    }

    /// The status is rewritten only when the ID, the observed generation or a condition
    /// differs from what is stored; fields of other writers do not count.
    #[test]
    fn stored_status_is_compared_on_owned_fields() {
        let conds = kstatus_conditions(
            &[],
            &Outcome::Ready {
                message: "ok".into(),
            },
            Some(2),
            Timestamp::UNIX_EPOCH,
        );
        let obj = object(
            "acme",
            "v",
            json!({"id": "var-1", "observedGeneration": 2, "conditions": conds, "versionId": "sv-x", "status": "uploaded"}),
            &[],
        );
        let stored = StoredStatus::of(&obj);
        assert_eq!(stored.status.as_deref(), Some("uploaded"));
        assert!(stored.shows(Some("var-1"), &conds, Some(2)));
        assert!(!stored.shows(Some("var-2"), &conds, Some(2)));
        assert!(!stored.shows(Some("var-1"), &conds, Some(3)));
        let later = kstatus_conditions(
            &conds,
            &Outcome::progressing(REASON_WAITING_FOR_MODULE, "x"),
            Some(2),
            Timestamp::UNIX_EPOCH,
        );
        assert!(!stored.shows(Some("var-1"), &later, Some(2)));
        // Recomputing the same outcome keeps the stored conditions, so nothing is written.
        let again = kstatus_conditions(
            &stored.conditions,
            &Outcome::Ready {
                message: "ok".into(),
            },
            Some(2),
            Timestamp::now(),
        );
        assert!(stored.shows(Some("var-1"), &again, Some(2)));
        // A malformed status counts as absent, but its ID is still read.
        let bad = object(
            "acme",
            "v",
            json!({"id": "var-1", "conditions": "nope"}),
            &[],
        );
        let stored = StoredStatus::of(&bad);
        assert_eq!(stored.id.as_deref(), Some("var-1"));
        assert!(stored.conditions.is_empty());
        assert_eq!(
            StoredStatus::of(&object("acme", "v", Value::Null, &[])),
            StoredStatus::default()
        );
    }

    /// The apply body names only the fields the controller owns, so server-side apply
    /// leaves the API server's fields (upload state, version ID) alone.
    #[test]
    fn apply_body_holds_only_owned_fields() {
        let ar = ApiResource::erase::<ConfigurationVersion>(&());
        let conds = kstatus_conditions(
            &[],
            &Outcome::progressing(REASON_WAITING_FOR_UPLOAD, "w"),
            Some(1),
            Timestamp::UNIX_EPOCH,
        );
        let body = status_apply_body(&ar, Some("cv-1"), &conds, Some(1));
        assert_eq!(body["apiVersion"], "terrace.dev/v1alpha1");
        assert_eq!(body["kind"], "ConfigurationVersion");
        let keys: Vec<&String> = body["status"]
            .as_object()
            .map(|m| m.keys().collect())
            .unwrap_or_default();
        assert_eq!(keys, ["conditions", "id", "observedGeneration"]);
        let types: Vec<&str> = conds.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(
            types,
            [CONDITION_READY, CONDITION_RECONCILING, CONDITION_STALLED]
        );
        let body = status_apply_body(&ar, None, &conds, None);
        let keys: Vec<&String> = body["status"]
            .as_object()
            .map(|m| m.keys().collect())
            .unwrap_or_default();
        assert_eq!(keys, ["conditions"]);
    }

    /// An Organization event reconciles the objects of its namespace that are not Ready
    /// or not labelled with it; a module event reconciles the variables naming it.
    #[test]
    fn watch_mappers_pick_the_affected_objects() {
        let ar = ApiResource::erase::<TestVariable>(&());
        let ready = kstatus_conditions(
            &[],
            &Outcome::Ready { message: "".into() },
            Some(1),
            Timestamp::UNIX_EPOCH,
        );
        let stalled = kstatus_conditions(
            &[],
            &Outcome::stalled(REASON_ORGANIZATION_NOT_FOUND, ""),
            Some(1),
            Timestamp::UNIX_EPOCH,
        );
        let objs: Vec<Arc<DynamicObject>> = vec![
            object(
                "acme",
                "ready",
                json!({"conditions": ready}),
                &[(LABEL_ORGANIZATION, "acme")],
            ),
            object("acme", "orphan", json!({"conditions": stalled}), &[]),
            object(
                "acme",
                "fresh",
                Value::Null,
                &[(LABEL_ORGANIZATION, "acme")],
            ),
            object("other", "elsewhere", Value::Null, &[]),
        ]
        .into_iter()
        .map(Arc::new)
        .collect();
        let names = |refs: Vec<ObjectRef<DynamicObject>>| {
            refs.into_iter().map(|r| r.name).collect::<Vec<_>>()
        };
        assert_eq!(
            names(affected_by_organization(&objs, &ar, "acme", "acme")),
            ["orphan", "fresh"]
        );
        assert_eq!(
            names(affected_by_organization(&objs, &ar, "acme", "globex")),
            ["ready", "orphan", "fresh"]
        );
        let module = RegistryModule {
            metadata: ObjectMeta {
                name: Some("net".into()),
                namespace: Some("acme".into()),
                ..Default::default()
            },
            spec: Default::default(),
            status: None,
        };
        assert_eq!(
            names(variables_of_module(&objs, &ar, &module)),
            ["ready", "orphan", "fresh"]
        );
    }
}
