//! The shared [`Index`] handle and what keeps it current: the lock, the generation readers
//! wait on, one watch per kind feeding its events in, and the per-kind watch statistics the
//! metrics report.

use super::*;
use terrace_crds::watch::WatchBackoff;

/// What a kind's watch last did, for the metrics.
#[derive(Debug, Default)]
pub struct WatchStats {
    /// Unix milliseconds of the last event (of the index's creation before the first).
    pub last_event_ms: AtomicI64,
    /// Watch errors so far.
    pub errors: AtomicU64,
    /// Objects skipped because they did not deserialize.
    pub invalid: AtomicU64,
}

/// Now in Unix milliseconds.
pub fn unix_millis() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// The indexes plus change notification.
pub struct Index {
    inner: RwLock<Inner>,
    changes: tokio::sync::watch::Sender<u64>,
    /// Bumped on every change (what [`Index::generation`] reads without a lock).
    generation: AtomicU64,
    synced: tokio::sync::watch::Sender<usize>,
    /// Per watched kind, in [`kinds::NAMES`] order.
    watches: Vec<(&'static str, WatchStats)>,
    /// Durations of [`Index::wait_until`] and how many gave up.
    wait_seconds: Histogram,
    wait_timeouts: Counter,
}

impl std::fmt::Debug for Index {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Index").finish_non_exhaustive()
    }
}

impl Default for Index {
    fn default() -> Self {
        Self {
            inner: RwLock::default(),
            changes: tokio::sync::watch::Sender::new(0),
            generation: AtomicU64::new(0),
            synced: tokio::sync::watch::Sender::new(0),
            watches: kinds::NAMES
                .iter()
                .map(|k| {
                    (
                        *k,
                        WatchStats {
                            last_event_ms: AtomicI64::new(unix_millis()),
                            ..Default::default()
                        },
                    )
                })
                .collect(),
            // 1 ms … 8 s (the waits are bounded by a few seconds).
            wait_seconds: Histogram::new(exponential_buckets(0.001, 2.0, 14)),
            wait_timeouts: Counter::default(),
        }
    }
}

impl Index {
    /// Reads the indexes. Never hold the guard across an await.
    pub fn read(&self) -> RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(|e| e.into_inner())
    }

    fn changed(&self) {
        self.generation.fetch_add(1, Ordering::Release);
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// A number that changes whenever anything in the index does: equal readings mean
    /// nothing changed in between.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Inserts an object directly, as its watch would (tests and benchmarks).
    pub fn insert<K: Indexed>(&self, o: K) {
        K::put(&mut self.write(), slim(o));
        self.changed();
    }

    /// Each watched kind's name and statistics.
    pub fn watch_stats(&self) -> impl Iterator<Item = (&'static str, &WatchStats)> {
        self.watches.iter().map(|(k, s)| (*k, s))
    }

    fn stats(&self, kind: &str) -> Option<&WatchStats> {
        self.watches
            .iter()
            .find(|(k, _)| *k == kind)
            .map(|(_, s)| s)
    }

    /// The histogram of [`Index::wait_until`] durations and the counter of its timeouts
    /// (handles for a registry).
    pub fn wait_metrics(&self) -> (Histogram, Counter) {
        (self.wait_seconds.clone(), self.wait_timeouts.clone())
    }

    /// Waits until every watch has delivered its initial list, at most `timeout`.
    pub async fn wait_synced(&self, timeout: Duration) -> bool {
        let mut rx = self.synced.subscribe();
        let all = self.watches.len();
        tokio::time::timeout(timeout, rx.wait_for(|n| *n >= all))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// Waits until `cond` holds on the indexes, at most `timeout`. Returns whether it held.
    pub async fn wait_until(
        &self,
        timeout: Duration,
        mut cond: impl FnMut(&Inner) -> bool,
    ) -> bool {
        let start = Instant::now();
        let mut rx = self.changes.subscribe();
        let wait = async {
            loop {
                if cond(&self.read()) {
                    return true;
                }
                if rx.changed().await.is_err() {
                    return false;
                }
            }
        };
        let held = tokio::time::timeout(timeout, wait).await.unwrap_or(false);
        self.wait_seconds.observe(start.elapsed().as_secs_f64());
        if !held {
            self.wait_timeouts.inc();
        }
        held
    }

    /// Starts the watches feeding the indexes, one per [`Indexed`] kind; they run until
    /// the returned tasks are aborted or the process ends.
    pub fn spawn_watches(
        self: &Arc<Self>,
        client: kube::Client,
    ) -> Vec<tokio::task::JoinHandle<()>> {
        struct Spawn<'a>(&'a Arc<Index>, &'a kube::Client);
        impl kinds::PerKind for Spawn<'_> {
            type Out = tokio::task::JoinHandle<()>;
            fn kind<K: Indexed>(&mut self) -> Self::Out {
                tokio::spawn(feed::<K>(self.0.clone(), self.1.clone()))
            }
        }
        kinds::each(&mut Spawn(self, &client))
    }
}

/// Feeds kind `K` into the index from a guarded watch.
async fn feed<K: Indexed>(index: Arc<Index>, client: kube::Client) {
    let api: Api<DeserializeGuard<K>> = Api::all(client);
    let mut buffer: Vec<K> = Vec::new();
    let mut first = true;
    let stream = watcher::watcher(api, watcher::Config::default()).backoff(WatchBackoff::default());
    futures::pin_mut!(stream);
    let Some(stats) = index.stats(K::NAME) else {
        tracing::error!(
            kind = K::NAME,
            "a watched kind is missing from the kind list"
        );
        return;
    };
    while let Some(event) = stream.next().await {
        match &event {
            Ok(_) => stats.last_event_ms.store(unix_millis(), Ordering::Relaxed),
            Err(_) => {
                stats.errors.fetch_add(1, Ordering::Relaxed);
            }
        }
        match event {
            Ok(Event::Init) => buffer.clear(),
            Ok(Event::InitApply(g)) => match g.0 {
                Ok(o) => buffer.push(slim(o)),
                Err(invalid) => skipped::<K>(stats, &invalid),
            },
            Ok(Event::InitDone) => {
                {
                    let mut inner = index.write();
                    K::clear(&mut inner);
                    // Taken, not drained: a drained buffer would keep its capacity (a
                    // whole list's worth of objects) for as long as the watch runs.
                    for o in std::mem::take(&mut buffer) {
                        K::put(&mut inner, o);
                    }
                }
                if first {
                    first = false;
                    index.synced.send_modify(|n| *n += 1);
                }
            }
            Ok(Event::Apply(g)) => match g.0 {
                Ok(o) => K::put(&mut index.write(), slim(o)),
                // An object that stopped deserializing leaves the index.
                Err(invalid) => {
                    skipped::<K>(stats, &invalid);
                    K::remove_key(&mut index.write(), &K::key(&invalid.metadata));
                }
            },
            Ok(Event::Delete(g)) => {
                let key = match &g.0 {
                    Ok(o) => K::key(o.meta()),
                    Err(invalid) => K::key(&invalid.metadata),
                };
                K::remove_key(&mut index.write(), &key);
            }
            Err(e) => {
                tracing::warn!(error = %e, kind = K::NAME, "index watch error");
                continue;
            }
        }
        index.changed();
    }
}

/// Reports an object of kind `K` that does not deserialize (log and metric).
fn skipped<K: Indexed>(stats: &WatchStats, invalid: &kube::core::error_boundary::InvalidObject) {
    stats.invalid.fetch_add(1, Ordering::Relaxed);
    tracing::warn!(
        kind = K::NAME,
        namespace = invalid.metadata.namespace.as_deref().unwrap_or(""),
        name = invalid.metadata.name.as_deref().unwrap_or(""),
        error = %invalid.error,
        "skipping an object that does not deserialize"
    );
}
