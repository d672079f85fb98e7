//! Pods, as the Pod strategy and storage treat them: `generation` is maintained, a new
//! Pod starts `Pending`, a Pod the simulated node runs is deleted gracefully (it keeps a
//! `deletionTimestamp` until the kubelet has stopped its containers, and a later delete
//! may only shorten the grace period), and `pods/log` is served by the kubelet
//! ([`crate::kubelet::logs`]).

use super::{KindBehaviour, WriteRules};
use crate::Shared;
use crate::meta::{DeleteOpts, finalizers, meta_mut};
use crate::resource::ResourceInfo;
use crate::resource::{in_version, res_key};
use crate::status::qualified;
use crate::status::{ApiError, ApiResult};
use crate::store::State;
use axum::response::Response;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;

/// Core `v1` Pods.
pub struct Pods;

impl KindBehaviour for Pods {
    fn write_rules(&self) -> WriteRules {
        WriteRules {
            tracks_generation: true,
            ..WriteRules::GENERIC
        }
    }

    fn prepare_for_create(&self, _: &ResourceInfo, obj: &mut Value, _: &str) -> ApiResult<()> {
        if let Some(m) = obj.as_object_mut() {
            m.insert(
                "status".into(),
                json!({"phase": "Pending", "qosClass": "BestEffort"}),
            );
        }
        Ok(())
    }

    fn grace_period(&self, pod: &Value, opts: &DeleteOpts) -> i64 {
        grace_period(pod, opts)
    }

    /// The first delete takes the generic path (with the grace period above). A later
    /// one can only change a pending graceful deletion: a shorter grace period moves it
    /// forward, and one at zero without finalizers completes it.
    fn delete(
        &self,
        st: &mut State,
        info: &ResourceInfo,
        old: &Value,
        opts: &DeleteOpts,
    ) -> Option<ApiResult<Value>> {
        if !super::being_deleted(old) {
            return None;
        }
        let current = old
            .pointer("/metadata/deletionGracePeriodSeconds")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        let res = res_key(info);
        let remove = |st: &mut State| {
            let key = crate::store::obj_key(old);
            st.remove(&res, &key)
                .map(|last| in_version(&last, info))
                .ok_or_else(|| ApiError::not_found(&qualified(info), &key.1))
        };
        let period = match opts.grace_period {
            Some(p) if current > 0 && p.max(0) < current => p.max(0),
            _ if current == 0 && finalizers(old).is_empty() => return Some(remove(st)),
            _ => return None,
        };
        if period == 0 && finalizers(old).is_empty() {
            return Some(remove(st));
        }
        let mut o = old.clone();
        if let Err(e) = meta_mut(&mut o).map(|m| {
            m.insert(
                "deletionTimestamp".into(),
                json!(crate::meta::rfc3339_in(period)),
            );
            m.insert("deletionGracePeriodSeconds".into(), json!(period));
        }) {
            return Some(Err(e));
        }
        Some(Ok(in_version(&st.put(&res, o), info)))
    }

    fn read_subresources(&self) -> &'static [&'static str] {
        &["log"]
    }

    fn get_subresource(
        &self,
        shared: &Arc<Shared>,
        sub: &str,
        pod: Arc<Value>,
        query: &HashMap<String, String>,
    ) -> ApiResult<Response> {
        match sub {
            "log" => crate::kubelet::logs::serve(shared, pod, query),
            _ => Err(ApiError::page_not_found()),
        }
    }
}

/// The grace period of a Pod's deletion, as the Pod strategy's `CheckGracefulDelete`
/// decides it: the request's `gracePeriodSeconds`, else the Pod's
/// `terminationGracePeriodSeconds` (defaulted to 30); 0 for a Pod that no node runs
/// (`spec.nodeName` empty) or that has finished (`Succeeded`/`Failed`); 1 for a negative one.
pub fn grace_period(pod: &Value, opts: &DeleteOpts) -> i64 {
    let scheduled = pod
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .is_some_and(|n| !n.is_empty());
    let finished = matches!(
        pod.pointer("/status/phase").and_then(Value::as_str),
        Some("Succeeded" | "Failed")
    );
    if !scheduled || finished {
        return 0;
    }
    let period = opts.grace_period.unwrap_or_else(|| {
        pod.pointer("/spec/terminationGracePeriodSeconds")
            .and_then(Value::as_i64)
            .unwrap_or(30)
    });
    if period < 0 { 1 } else { period }
}
