//! Removing one finalizer from an object: the test Pod's (log archived), the blob
//! finalizer of StateVersions and ConfigurationVersions (bucket objects deleted).

use kube::api::{Patch, PatchParams};
use kube::{Api, Resource, ResourceExt};
use serde_json::json;

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
    match api
        .patch(
            &obj.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => {
            Err(Error::Conflict(format!("{} changed", obj.name_any())))
        }
        Err(e) => Err(e.into()),
    }
}
