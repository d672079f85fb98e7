//! Removing one finalizer from an object: the test Pod's (log archived), the blob
//! finalizer of StateVersions and ConfigurationVersions (bucket objects deleted); and
//! the merge patch guarded by the object's `resourceVersion` it is written with.

use kube::api::{Patch, PatchParams};
use kube::{Api, Resource, ResourceExt};
use serde_json::{Value, json};

use crate::Error;

/// Removes `finalizer` from `obj`. The merge patch carries the object's
/// `resourceVersion`, so a concurrent change of its finalizers fails with 409 (and the
/// reconcile retries) instead of dropping someone else's; an object already gone, or
/// without the finalizer, is fine.
pub async fn remove<K>(api: &Api<K>, obj: &K, finalizer: &str) -> Result<(), Error>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    K::DynamicType: Default,
{
    let current = obj.finalizers();
    if !current.iter().any(|f| f == finalizer) {
        return Ok(());
    }
    let rest: Vec<&String> = current.iter().filter(|f| *f != finalizer).collect();
    let patch = json!({"metadata": {
        "resourceVersion": obj.resource_version(),
        "finalizers": rest,
    }});
    let name = obj.name_any();
    match guarded_merge(api, &name, &patch, &name).await {
        Err(Error::Kube(kube::Error::Api(s))) if s.code == 404 => Ok(()),
        done => done,
    }
}

/// Merge-patches object `name` with `patch`, which carries the object's
/// `resourceVersion`: a concurrent change fails with 409, answered as
/// [`Error::Conflict`] ("`what` changed") so the reconcile retries.
pub async fn guarded_merge<K>(
    api: &Api<K>,
    name: &str,
    patch: &Value,
    what: &str,
) -> Result<(), Error>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api
        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => {
            Err(Error::Conflict(format!("{what} changed")))
        }
        Err(e) => Err(e.into()),
    }
}
