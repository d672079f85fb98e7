//! The operator's marks on objects it does not own the spec of: one annotation, written
//! with a merge patch (the rest of the object untouched, no resourceVersion: the mark
//! records that something was done, and doing it twice is harmless).

use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::Error;

/// Sets annotation `key` of `obj` (namespaced) to `value`.
pub async fn annotate<K>(
    client: &kube::Client,
    obj: &K,
    key: &str,
    value: &str,
) -> Result<(), Error>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), &obj.namespace().unwrap_or_default());
    api.patch(
        &obj.name_any(),
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {key: value}}})),
    )
    .await?;
    Ok(())
}
