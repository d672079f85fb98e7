//! The state the TestRun controller's steps share.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use kube::runtime::events::Recorder;
use kube::runtime::reflector::{ObjectRef, Store};
use terrace_crds::TestRun;

use crate::Context;
use crate::catalog::CatalogStores;
use crate::identity::Organizations;

/// State of the TestRun controller.
pub(super) struct RunContext {
    pub(super) base: Arc<Context>,
    pub(super) orgs: Organizations,
    /// The catalog's caches: configuration versions, modules, test variables.
    pub(super) catalog: CatalogStores,
    pub(super) recorder: Recorder,
    pub(super) runs: Store<TestRun>,
    /// Serialises admission; holds runs admitted by this process whose queued status the
    /// cache may not show yet.
    pub(super) admitted: tokio::sync::Mutex<HashSet<ObjectRef<TestRun>>>,
    /// Failed log archive attempts per TestRun uid.
    pub(super) archive_failures: std::sync::Mutex<HashMap<String, u32>>,
    /// Signalled when a run holding a slot ends (see [`super::slots::wake_waiting`]).
    pub(super) slot_freed: tokio::sync::Notify,
    /// Runs the waker wants reconciled now.
    pub(super) wake: futures::channel::mpsc::UnboundedSender<ObjectRef<TestRun>>,
}
