//! The per-Pod worker: container states, the Pod status it writes, starting, restarting
//! and signalling the containers' processes, and the task that drives it until the Pod is
//! gone.

use super::*;

#[derive(Clone, Debug, PartialEq)]
pub(super) enum CState {
    Waiting {
        reason: String,
        message: Option<String>,
    },
    Running {
        started: String,
    },
    Terminated {
        code: i32,
        signal: Option<i32>,
        reason: String,
        message: Option<String>,
        started: String,
        finished: String,
    },
}

impl CState {
    fn waiting(reason: &str, message: Option<String>) -> CState {
        CState::Waiting {
            reason: reason.into(),
            message,
        }
    }

    fn to_json(&self) -> Value {
        match self {
            CState::Waiting { reason, message } => {
                let mut w = json!({"reason": reason});
                if let Some(m) = message {
                    w["message"] = json!(m);
                }
                json!({"waiting": w})
            }
            CState::Running { started } => json!({"running": {"startedAt": started}}),
            CState::Terminated {
                code,
                signal,
                reason,
                message,
                started,
                finished,
            } => {
                let mut t = json!({"exitCode": code, "reason": reason, "startedAt": started, "finishedAt": finished});
                if let Some(s) = signal {
                    t["signal"] = json!(s);
                }
                if let Some(m) = message.as_ref().filter(|m| !m.is_empty()) {
                    t["message"] = json!(m);
                }
                json!({"terminated": t})
            }
        }
    }

    fn succeeded(&self) -> bool {
        matches!(self, CState::Terminated { code: 0, .. })
    }
}

pub(super) struct Ctr {
    spec: Value,
    name: String,
    init: bool,
    state: CState,
    last: Option<CState>,
    restarts: u32,
    pid: Option<i32>,
    /// When to (re)try starting it; `None`: never again.
    next_try: Option<Instant>,
    termination: Option<(PathBuf, bool)>,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Stage {
    Init(usize),
    Main,
    /// An init container failed for good.
    InitFailed,
}

pub(super) struct Worker {
    shared: Arc<Shared>,
    pod: Arc<Value>,
    key: ObjKey,
    uid: String,
    dir: PathBuf,
    ctrs: Vec<Ctr>,
    n_init: usize,
    stage: Stage,
    policy: String,
    start_time: String,
    conditions: Vec<(String, String, String)>,
    volumes: Option<HashMap<String, PathBuf>>,
    exits: mpsc::UnboundedSender<(usize, std::process::ExitStatus)>,
}

pub(super) fn container_specs(pod: &Value, field: &str) -> Vec<Value> {
    pod.pointer(&format!("/spec/{field}"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

impl Worker {
    fn running(&self) -> impl Iterator<Item = i32> + '_ {
        self.ctrs.iter().filter_map(|c| c.pid)
    }

    fn done(&self) -> bool {
        self.stage == Stage::InitFailed
            || (self.stage == Stage::Main
                && self
                    .ctrs
                    .iter()
                    .filter(|c| !c.init)
                    .all(|c| matches!(c.state, CState::Terminated { .. })))
    }

    fn phase(&self, finishing: bool) -> &'static str {
        let mains: Vec<&Ctr> = self.ctrs.iter().filter(|c| !c.init).collect();
        if self.stage == Stage::InitFailed {
            return "Failed";
        }
        if self.done() || finishing {
            return if self.stage == Stage::Main && mains.iter().all(|c| c.state.succeeded()) {
                "Succeeded"
            } else {
                "Failed"
            };
        }
        if self.stage == Stage::Main
            && mains
                .iter()
                .any(|c| !matches!(c.state, CState::Waiting { .. }) || c.restarts > 0)
        {
            return "Running";
        }
        "Pending"
    }

    fn set_condition(&mut self, kind: &str, status: bool, reason: Option<&str>) {
        let s = if status { "True" } else { "False" };
        let reason = reason.unwrap_or("").to_string();
        match self.conditions.iter_mut().find(|(t, ..)| t == kind) {
            Some(c) if c.1 == s => c.2 = reason,
            Some(c) => {
                c.1 = s.into();
                c.2 = reason;
            }
            None => self.conditions.push((kind.into(), s.into(), reason)),
        }
    }

    fn status(&mut self, finishing: bool, times: &mut HashMap<String, (String, String)>) -> Value {
        let phase = self.phase(finishing);
        let completed = matches!(phase, "Succeeded" | "Failed");
        let not_init: Vec<String> = self
            .ctrs
            .iter()
            .filter(|c| c.init && !c.state.succeeded())
            .map(|c| c.name.clone())
            .collect();
        let unready: Vec<String> = self
            .ctrs
            .iter()
            .filter(|c| !c.init && !matches!(c.state, CState::Running { .. }))
            .map(|c| c.name.clone())
            .collect();
        let initialized = self.stage == Stage::Main || not_init.is_empty();
        let ready = self.stage == Stage::Main && unready.is_empty() && !completed;
        let ready_reason = if completed {
            "PodCompleted"
        } else {
            "ContainersNotReady"
        };
        self.set_condition("PodReadyToStartContainers", true, None);
        self.set_condition(
            "Initialized",
            initialized,
            (!initialized).then_some("ContainersNotInitialized"),
        );
        self.set_condition("Ready", ready, (!ready).then_some(ready_reason));
        self.set_condition("ContainersReady", ready, (!ready).then_some(ready_reason));
        self.set_condition("PodScheduled", true, None);
        let now = crate::meta::now_rfc3339();
        let conditions: Vec<Value> = self
            .conditions
            .iter()
            .map(|(t, s, reason)| {
                let entry = times
                    .entry(t.clone())
                    .or_insert_with(|| (s.clone(), now.clone()));
                if entry.0 != *s {
                    *entry = (s.clone(), now.clone());
                }
                let mut c = json!({"type": t, "status": s, "lastProbeTime": null, "lastTransitionTime": entry.1});
                if !reason.is_empty() {
                    c["reason"] = json!(reason);
                    let names = match t.as_str() {
                        "Initialized" => Some(&not_init),
                        "Ready" | "ContainersReady" if reason == "ContainersNotReady" => {
                            Some(&unready)
                        }
                        _ => None,
                    };
                    if let Some(n) = names {
                        let word = if t == "Initialized" {
                            "incomplete"
                        } else {
                            "unready"
                        };
                        c["message"] = json!(format!(
                            "containers with {word} status: [{}]",
                            n.join(" ")
                        ));
                    }
                }
                c
            })
            .collect();
        let statuses = |init: bool| -> Vec<Value> {
            self.ctrs
                .iter()
                .filter(|c| c.init == init)
                .map(|c| {
                    let running = matches!(c.state, CState::Running { .. });
                    let mut s = json!({
                        "name": c.name,
                        "image": c.spec.get("image").cloned().unwrap_or(json!("")),
                        "imageID": "",
                        "ready": if init { c.state.succeeded() } else { running && !completed },
                        "restartCount": c.restarts,
                        "started": running,
                        "state": c.state.to_json(),
                        "lastState": c.last.as_ref().map(CState::to_json).unwrap_or(json!({})),
                    });
                    if let Some(pid) = c.pid {
                        s["containerID"] = json!(format!("terrace-sim://{pid}"));
                    }
                    s
                })
                .collect()
        };
        let mut status = json!({
            "phase": phase,
            "conditions": conditions,
            "hostIP": "127.0.0.1",
            "hostIPs": [{"ip": "127.0.0.1"}],
            "podIP": "127.0.0.1",
            "podIPs": [{"ip": "127.0.0.1"}],
            "startTime": self.start_time,
            "qosClass": "BestEffort",
            "containerStatuses": statuses(false),
        });
        if self.n_init > 0 {
            status["initContainerStatuses"] = json!(statuses(true));
        }
        status
    }

    /// Writes `status` if the Pod is still this one; with `finish`, also completes a
    /// pending deletion in the same step. Answers whether a deletion is pending.
    fn write(&self, status: Value, finish: bool) -> bool {
        let (key, uid) = (self.key.clone(), self.uid.clone());
        self.shared.write(|st| {
            let Some(cur) = st.get(&pods_res(), &key) else {
                return false;
            };
            if uid_of(&cur) != uid {
                return false;
            }
            let mut o = (*cur).clone();
            if o.pointer("/spec/nodeName")
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
            {
                o["spec"]["nodeName"] = json!(NODE_NAME);
            }
            o["status"] = status;
            let deleting = o.pointer("/metadata/deletionTimestamp").is_some();
            let stored = if o == *cur {
                cur
            } else {
                st.put(&pods_res(), o)
            };
            if finish && deleting {
                finish_deletion(st, &stored);
            }
            deleting
        })
    }

    fn lookup(&self) -> impl Fn(&str, &str) -> Option<Arc<Value>> + '_ {
        move |plural: &str, name: &str| {
            self.shared.read(|st| {
                st.get(
                    &(String::new(), plural.to_string()),
                    &(self.key.0.clone(), name.to_string()),
                )
            })
        }
    }

    /// The containers of the current stage waiting to be started (now or later): the
    /// current init container, or every main container once the init containers are done.
    fn startable(&self) -> impl Iterator<Item = usize> + '_ {
        let range = match self.stage {
            Stage::Init(i) => i..i + 1,
            Stage::Main => self.n_init..self.ctrs.len(),
            Stage::InitFailed => 0..0,
        };
        range.filter(|&i| {
            let c = &self.ctrs[i];
            c.pid.is_none() && matches!(c.state, CState::Waiting { .. })
        })
    }

    /// When the next container of the current stage is due. Containers of later stages
    /// do not count: waking for them would spin until their stage comes.
    fn next_try(&self) -> Option<Instant> {
        self.startable().filter_map(|i| self.ctrs[i].next_try).min()
    }

    /// Starts the containers that are due.
    fn start_due(&mut self, host_env: &[(String, OsString)]) {
        let now = Instant::now();
        let due: Vec<usize> = self
            .startable()
            .filter(|&i| self.ctrs[i].next_try.is_some_and(|t| t <= now))
            .collect();
        if due.is_empty() {
            return;
        }
        if self.volumes.is_none() {
            let pod = self.pod.clone();
            let r = spec::volumes(&pod, &self.dir, &self.lookup());
            match r {
                Ok(v) => self.volumes = Some(v),
                Err(msg) => {
                    for &i in &due {
                        let c = &mut self.ctrs[i];
                        c.state = CState::waiting(
                            if c.init {
                                "PodInitializing"
                            } else {
                                "ContainerCreating"
                            },
                            Some(msg.clone()),
                        );
                        c.next_try = Some(now + Duration::from_secs(1));
                    }
                    return;
                }
            }
        }
        let empty = HashMap::new();
        for i in due {
            let config = &self.shared.config;
            let host = spec::Host {
                pod_dir: &self.dir,
                volumes: self.volumes.as_ref().unwrap_or(&empty),
                image_overrides: &config.image_overrides,
                command_overrides: &config.command_overrides,
                base_env: host_env,
            };
            let planned = spec::plan(&host, &self.pod, &self.ctrs[i].spec, &self.lookup());
            let c = &mut self.ctrs[i];
            match planned {
                Err(spec::Blocked::Config(m)) => {
                    c.state = CState::waiting("CreateContainerConfigError", Some(m));
                    c.next_try = Some(now + Duration::from_secs(1));
                }
                Err(spec::Blocked::Image(m)) => {
                    c.state = CState::waiting("ErrImagePull", Some(m));
                    c.next_try = None;
                }
                Ok(plan) => {
                    let started = crate::meta::now_rfc3339();
                    c.termination = Some((plan.termination_path.clone(), plan.fallback_to_logs));
                    match spawn(&self.dir, &c.name, &plan) {
                        Ok(mut child) => {
                            c.pid = child.id().and_then(|p| i32::try_from(p).ok());
                            c.state = CState::Running { started };
                            let tx = self.exits.clone();
                            tokio::spawn(async move {
                                if let Ok(status) = child.wait().await {
                                    let _ = tx.send((i, status));
                                }
                            });
                        }
                        Err(e) => {
                            c.state = CState::Terminated {
                                code: 128,
                                signal: None,
                                reason: "StartError".into(),
                                message: Some(format!(
                                    "failed to start container \"{}\": exec: \"{}\": {e}",
                                    c.name, plan.program
                                )),
                                started: started.clone(),
                                finished: started,
                            };
                            c.next_try = None;
                            self.after_exit(i, false);
                        }
                    }
                }
            }
        }
    }

    /// Restart policy and stage after container `i` terminated.
    fn after_exit(&mut self, i: usize, terminating: bool) {
        let c = &mut self.ctrs[i];
        let ok = c.state.succeeded();
        let restart = !terminating
            && match self.policy.as_str() {
                "Always" => !c.init || !ok,
                "OnFailure" => !ok,
                _ => false,
            };
        if restart {
            c.restarts += 1;
            c.last = Some(c.state.clone());
            let backoff = Duration::from_secs(1 << c.restarts.min(4).saturating_sub(1));
            c.state = CState::waiting(
                "CrashLoopBackOff",
                Some(format!(
                    "back-off {}s restarting failed container={} pod={}",
                    backoff.as_secs(),
                    c.name,
                    self.key.1
                )),
            );
            c.next_try = Some(Instant::now() + backoff);
            return;
        }
        if let Stage::Init(n) = self.stage
            && n == i
        {
            self.stage = if !ok {
                Stage::InitFailed
            } else if n + 1 < self.n_init {
                Stage::Init(n + 1)
            } else {
                Stage::Main
            };
        }
    }

    fn exited(&mut self, i: usize, status: std::process::ExitStatus, terminating: bool) {
        let finished = crate::meta::now_rfc3339();
        // A container killed by a signal reports 128 + the signal, as runc does.
        let (code, signal) = match (status.code(), status.signal()) {
            (Some(c), _) => (c, None),
            (None, Some(s)) => (128 + s, Some(s)),
            (None, None) => (1, None),
        };
        let c = &mut self.ctrs[i];
        if let Some(pid) = c.pid.take() {
            // The container's other processes go with its main one.
            let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
        }
        let started = match &c.state {
            CState::Running { started } => started.clone(),
            _ => finished.clone(),
        };
        let message = c.termination.as_ref().map(|(path, fallback)| {
            let mut m = read_limited(path, MAX_TERMINATION_MESSAGE);
            if m.is_empty() && *fallback && code != 0 {
                m = log_tail(&spec::log_path(&self.dir, &c.name, false));
            }
            m
        });
        c.state = CState::Terminated {
            code,
            signal,
            reason: if code == 0 { "Completed" } else { "Error" }.into(),
            message,
            started,
            finished,
        };
        self.after_exit(i, terminating);
    }

    fn signal_all(&self, sig: Signal, group: bool) {
        for pid in self.running() {
            let pid = Pid::from_raw(pid);
            let _ = if group {
                killpg(pid, sig)
            } else {
                kill(pid, sig)
            };
        }
    }
}

pub(super) async fn worker(shared: Arc<Shared>, pod: Arc<Value>, mut life: watch::Receiver<Life>) {
    let uid = uid_of(&pod);
    // Pods' folders hold Secret volumes and logs: owner only, as the data directory.
    if let Err(e) = crate::store::create_private_dir(&shared.pods_dir) {
        tracing::warn!(error = %e, "simulator: creating the Pods' folder");
    }
    let dir = pod_dir(&shared.pods_dir, &uid);
    let (exits_tx, mut exits) = mpsc::unbounded_channel();
    let mut ctrs = Vec::new();
    for (field, init) in [("initContainers", true), ("containers", false)] {
        for spec in container_specs(&pod, field) {
            let name = spec
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            ctrs.push(Ctr {
                state: CState::waiting(
                    if init {
                        "PodInitializing"
                    } else {
                        "ContainerCreating"
                    },
                    None,
                ),
                spec,
                name,
                init,
                last: None,
                restarts: 0,
                pid: None,
                next_try: Some(Instant::now()),
                termination: None,
            });
        }
    }
    let n_init = ctrs.iter().filter(|c| c.init).count();
    let mut w = Worker {
        key: crate::store::obj_key(&pod),
        policy: pod
            .pointer("/spec/restartPolicy")
            .and_then(Value::as_str)
            .unwrap_or("Always")
            .to_string(),
        stage: if n_init > 0 {
            Stage::Init(0)
        } else {
            Stage::Main
        },
        shared: shared.clone(),
        pod,
        uid,
        dir,
        ctrs,
        n_init,
        start_time: crate::meta::now_rfc3339(),
        conditions: Vec::new(),
        volumes: None,
        exits: exits_tx,
    };
    let host_env: Vec<(String, OsString)> = HOST_ENV
        .iter()
        .filter_map(|k| std::env::var_os(k).map(|v| (k.to_string(), v)))
        .chain(std::iter::once((
            "HOSTNAME".to_string(),
            OsString::from(&w.key.1),
        )))
        .collect();
    write_shims(&w.dir, &shared.config.command_overrides);
    let mut shutdown = shared.shutdown.subscribe();
    let mut times = HashMap::new();
    let mut terminating = false;
    let mut gone = false;
    let mut deadline: Option<Instant> = None;
    let mut last_written = Value::Null;
    loop {
        let current = life.borrow_and_update().clone();
        match current {
            Life::Alive => {}
            Life::Gone => {
                w.signal_all(Signal::SIGKILL, true);
                terminating = true;
                gone = true;
            }
            Life::Deleting { grace } => {
                if !terminating {
                    terminating = true;
                    if grace > 0 {
                        w.signal_all(Signal::SIGTERM, false);
                    }
                }
                let at = Instant::now() + Duration::from_secs(grace.max(0) as u64);
                deadline = Some(deadline.map_or(at, |d| d.min(at)));
            }
        }
        if !terminating {
            w.start_due(&host_env);
        }
        let idle = w.running().next().is_none();
        if gone && idle {
            return;
        }
        if (terminating || w.done()) && idle {
            let status = w.status(true, &mut times);
            w.write(status, true);
            return;
        }
        if !gone {
            let status = w.status(false, &mut times);
            if status != last_written {
                w.write(status.clone(), false);
                last_written = status;
            }
        }
        let next_try = if terminating { None } else { w.next_try() };
        tokio::select! {
            Some((i, status)) = exits.recv() => w.exited(i, status, terminating),
            r = life.changed() => if r.is_err() { gone = true; w.signal_all(Signal::SIGKILL, true); terminating = true; },
            _ = sleep_until(deadline), if deadline.is_some() => {
                w.signal_all(Signal::SIGKILL, true);
                deadline = None;
            }
            _ = sleep_until(next_try), if next_try.is_some() => {}
            _ = shutdown.wait_for(|s| *s) => {
                w.signal_all(Signal::SIGKILL, true);
                return;
            }
        }
    }
}

pub(super) async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}
