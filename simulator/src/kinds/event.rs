//! Events, as kube-apiserver serves them: one store behind two APIs. An Event written
//! through `events.k8s.io/v1` (what controllers' recorders write) is read through core
//! `v1` too (what `kubectl get events` and `kubectl describe` read), and the other way
//! round, with the fields renamed as the API server converts them (`regarding` ⇄
//! `involvedObject`, `note` ⇄ `message`, `reportingController` ⇄ `source.component`,
//! `deprecatedCount` ⇄ `count`, …). Here each write stores the other API's copy beside it
//! (same namespace and name) and each removal removes it.

use super::KindBehaviour;
use crate::resource::ResourceInfo;
use crate::status::ApiResult;
use crate::store::{ResKey, State, obj_key};
use serde_json::{Map, Value, json};

/// The events.k8s.io group.
pub const GROUP: &str = "events.k8s.io";

/// Events of either API.
pub struct Events;

fn core() -> ResKey {
    (String::new(), "events".into())
}

fn new_api() -> ResKey {
    (GROUP.into(), "events".into())
}

/// The fields both APIs have, as (core `v1` name, `events.k8s.io/v1` name): copied across
/// under the other API's name in either direction.
const RENAMED: &[(&str, &str)] = &[
    ("involvedObject", "regarding"),
    ("related", "related"),
    ("reason", "reason"),
    ("message", "note"),
    ("type", "type"),
    ("action", "action"),
    ("reportingInstance", "reportingInstance"),
];

/// The other API's copy of `obj` (of group `group`).
fn mirror(group: &str, obj: &Value) -> Value {
    let get = |k: &str| obj.get(k).cloned().unwrap_or(Value::Null);
    let mut meta = obj.get("metadata").cloned().unwrap_or_else(|| json!({}));
    if let Some(m) = meta.as_object_mut() {
        for k in ["uid", "resourceVersion", "managedFields", "selfLink"] {
            m.remove(k);
        }
    }
    let to_core = group == GROUP;
    let mut out = Map::new();
    let api_version = if to_core { "v1" } else { "events.k8s.io/v1" };
    out.insert("apiVersion".into(), json!(api_version));
    out.insert("kind".into(), json!("Event"));
    out.insert("metadata".into(), meta);
    for (core, new) in RENAMED {
        let (from, to) = if to_core { (new, core) } else { (core, new) };
        out.insert((*to).into(), get(from));
    }
    if let Some(s) = obj.get("series") {
        out.insert("series".into(), s.clone());
    }
    if to_core {
        out.insert("eventTime".into(), get("eventTime"));
        out.insert("reportingComponent".into(), get("reportingController"));
        out.insert(
            "source".into(),
            json!({"component": get("reportingController")}),
        );
        let series = obj.get("series");
        let count = obj
            .get("deprecatedCount")
            .cloned()
            .or_else(|| series.and_then(|s| s.get("count")).cloned())
            .unwrap_or(json!(1));
        out.insert("count".into(), count);
        let first = obj
            .get("deprecatedFirstTimestamp")
            .cloned()
            .unwrap_or_else(|| get("eventTime"));
        let last = obj
            .get("deprecatedLastTimestamp")
            .cloned()
            .or_else(|| series.and_then(|s| s.get("lastObservedTime")).cloned())
            .unwrap_or_else(|| first.clone());
        out.insert("firstTimestamp".into(), first);
        out.insert("lastTimestamp".into(), last);
    } else {
        let time = obj
            .get("eventTime")
            .filter(|t| !t.is_null())
            .cloned()
            .or_else(|| obj.get("firstTimestamp").cloned())
            .unwrap_or(Value::Null);
        out.insert("eventTime".into(), time);
        let controller = obj
            .get("reportingComponent")
            .filter(|c| c.as_str().is_some_and(|c| !c.is_empty()))
            .cloned()
            .or_else(|| obj.get("source").and_then(|s| s.get("component")).cloned())
            .unwrap_or(Value::Null);
        out.insert("reportingController".into(), controller);
        out.insert("deprecatedCount".into(), get("count"));
        out.insert("deprecatedFirstTimestamp".into(), get("firstTimestamp"));
        out.insert("deprecatedLastTimestamp".into(), get("lastTimestamp"));
        out.insert("deprecatedSource".into(), get("source"));
    }
    out.retain(|_, v| !v.is_null());
    Value::Object(out)
}

impl KindBehaviour for Events {
    fn before_store(
        &self,
        st: &mut State,
        info: &ResourceInfo,
        obj: &mut Value,
        _name: &str,
    ) -> ApiResult<()> {
        let other = if info.group == GROUP {
            core()
        } else {
            new_api()
        };
        st.put(&other, mirror(&info.group, obj));
        Ok(())
    }

    fn after_remove(&self, st: &mut State, last: &Value) {
        let key = obj_key(last);
        let other = if last
            .get("apiVersion")
            .and_then(Value::as_str)
            .is_some_and(|v| v.starts_with(GROUP))
        {
            core()
        } else {
            new_api()
        };
        st.remove(&other, &key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_reads_the_same_through_either_api() {
        let written = json!({
            "apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": "e1", "namespace": "org", "uid": "u1", "resourceVersion": "7"},
            "regarding": {"kind": "Run", "name": "run-1"},
            "reason": "Applied", "note": "done", "type": "Normal", "action": "Run",
            "eventTime": "2026-01-01T00:00:00.000000Z",
            "reportingController": "terrace-operator", "reportingInstance": "pod-1",
            "series": {"count": 3, "lastObservedTime": "2026-01-01T00:05:00.000000Z"},
        });
        let core = mirror(GROUP, &written);
        assert_eq!(core["apiVersion"], "v1");
        assert_eq!(core["involvedObject"], written["regarding"]);
        assert_eq!(core["message"], "done");
        assert_eq!(core["reason"], "Applied");
        assert_eq!(core["type"], "Normal");
        assert_eq!(core["action"], "Run");
        assert_eq!(core["reportingComponent"], "terrace-operator");
        assert_eq!(core["reportingInstance"], "pod-1");
        assert_eq!(core["source"]["component"], "terrace-operator");
        assert_eq!(core["count"], 3);
        assert_eq!(core["firstTimestamp"], written["eventTime"]);
        assert_eq!(core["lastTimestamp"], "2026-01-01T00:05:00.000000Z");
        assert!(core.get("related").is_none(), "absent fields stay absent");
        assert!(core["metadata"].get("uid").is_none());

        let back = mirror("", &core);
        assert_eq!(back["apiVersion"], "events.k8s.io/v1");
        for k in ["regarding", "reason", "note", "type", "action", "eventTime"] {
            assert_eq!(back[k], written[k], "{k}");
        }
        assert_eq!(back["reportingController"], "terrace-operator");
        assert_eq!(back["reportingInstance"], "pod-1");
        assert_eq!(back["deprecatedCount"], 3);
        assert_eq!(back["series"], written["series"]);
    }

    #[test]
    fn a_core_event_without_an_event_time_takes_its_first_timestamp() {
        let core = json!({
            "apiVersion": "v1", "kind": "Event", "metadata": {"name": "e2"},
            "involvedObject": {"kind": "Pod", "name": "p"}, "message": "pulled",
            "firstTimestamp": "2026-01-01T00:00:00Z", "source": {"component": "kubelet"},
        });
        let new = mirror("", &core);
        assert_eq!(new["regarding"], core["involvedObject"]);
        assert_eq!(new["note"], "pulled");
        assert_eq!(new["eventTime"], "2026-01-01T00:00:00Z");
        assert_eq!(new["reportingController"], "kubelet");
        assert_eq!(new["deprecatedSource"], core["source"]);
    }
}
