//! The blob finalizer of ConfigurationVersions: with an S3 blob store the API server puts
//! [`FINALIZER`] on every ConfigurationVersion it creates (owner references do not reach
//! a bucket), and this controller, once such a version is being deleted (itself, or with
//! its registry module), deletes its archive from the bucket and then removes the
//! finalizer. It runs only when the store is S3. StateVersions get the same treatment
//! from the retention controller ([`crate::retention`]), which already watches them.

use std::sync::Arc;

use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Api, Resource, ResourceExt};
use terrace_blobstore::BlobStore;
use terrace_blobstore::s3::S3Store;
use terrace_crds::ConfigurationVersion;
use terrace_crds::blobs::FINALIZER;

use crate::{Context, Error, metrics};

/// The controller, for the bucket `s3`.
pub fn controller(
    ctx: Arc<Context>,
    s3: S3Store,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    let api: Api<ConfigurationVersion> = Api::all(ctx.client.clone());
    let client = ctx.client.clone();
    metrics::BLOB_FINALIZER.run(
        Controller::new(api, watcher::Config::default()).graceful_shutdown_on(shutdown),
        move |cv, s3| reconcile(cv, client.clone(), s3),
        Arc::new(s3),
    )
}

async fn reconcile(
    cv: Arc<ConfigurationVersion>,
    client: kube::Client,
    s3: Arc<S3Store>,
) -> Result<Action, Error> {
    if cv.metadata.deletion_timestamp.is_none() || !cv.finalizers().iter().any(|f| f == FINALIZER) {
        return Ok(Action::await_change());
    }
    let ns = cv.namespace().unwrap_or_default();
    let key = cv
        .status
        .as_ref()
        .and_then(|s| s.archive.as_ref())
        .map(|a| a.key.clone());
    if let Some(key) = key {
        s3.scoped(&ns)
            .delete(&key)
            .await
            .map_err(|e| Error::Unavailable(format!("blob store: {e}")))?;
        tracing::info!(namespace = %ns, key, "deleted the archive of a deleted configuration version");
    }
    release(&client, cv.as_ref()).await?;
    Ok(Action::await_change())
}

/// Removes [`FINALIZER`] from `obj` (see [`crate::finalizers::remove`]).
pub async fn release<K>(client: &kube::Client, obj: &K) -> Result<(), Error>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let api: Api<K> = Api::namespaced(client.clone(), &obj.namespace().unwrap_or_default());
    crate::finalizers::remove(&api, obj, FINALIZER).await
}
