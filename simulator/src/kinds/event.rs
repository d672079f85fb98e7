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

/// The other API's copy of `obj` (of group `group`).
fn mirror(group: &str, obj: &Value) -> Value {
    let get = |k: &str| obj.get(k).cloned().unwrap_or(Value::Null);
    let mut meta = obj.get("metadata").cloned().unwrap_or_else(|| json!({}));
    if let Some(m) = meta.as_object_mut() {
        for k in ["uid", "resourceVersion", "managedFields", "selfLink"] {
            m.remove(k);
        }
    }
    let mut out = Map::new();
    if group == GROUP {
        out.insert("apiVersion".into(), json!("v1"));
        out.insert("kind".into(), json!("Event"));
        out.insert("metadata".into(), meta);
        out.insert("involvedObject".into(), get("regarding"));
        out.insert("related".into(), get("related"));
        out.insert("reason".into(), get("reason"));
        out.insert("message".into(), get("note"));
        out.insert("type".into(), get("type"));
        out.insert("action".into(), get("action"));
        out.insert("eventTime".into(), get("eventTime"));
        out.insert("reportingComponent".into(), get("reportingController"));
        out.insert("reportingInstance".into(), get("reportingInstance"));
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
        if let Some(s) = series {
            out.insert("series".into(), s.clone());
        }
    } else {
        out.insert("apiVersion".into(), json!("events.k8s.io/v1"));
        out.insert("kind".into(), json!("Event"));
        out.insert("metadata".into(), meta);
        out.insert("regarding".into(), get("involvedObject"));
        out.insert("related".into(), get("related"));
        out.insert("reason".into(), get("reason"));
        out.insert("note".into(), get("message"));
        out.insert("type".into(), get("type"));
        out.insert("action".into(), get("action"));
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
        out.insert("reportingInstance".into(), get("reportingInstance"));
        out.insert("deprecatedCount".into(), get("count"));
        out.insert("deprecatedFirstTimestamp".into(), get("firstTimestamp"));
        out.insert("deprecatedLastTimestamp".into(), get("lastTimestamp"));
        out.insert("deprecatedSource".into(), get("source"));
        if let Some(s) = obj.get("series") {
            out.insert("series".into(), s.clone());
        }
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
    fn fields_are_renamed_both_ways() {
        let new = json!({
            "apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": "e1", "namespace": "acme", "uid": "u1"},
            "regarding": {"kind": "Run", "name": "r"}, "reason": "Applied",
            "note": "run is applied", "type": "Normal", "action": "Apply",
            "eventTime": "2026-11-29T00:00:00.000000Z",
            "reportingController": "terrace-operator", "reportingInstance": "op-1",
        });
        let core = mirror(GROUP, &new);
        assert_eq!(core["apiVersion"], "v1");
        assert_eq!(core["involvedObject"]["name"], "r");
        assert_eq!(core["message"], "run is applied");
        assert_eq!(core["source"]["component"], "terrace-operator");
        assert_eq!(core["count"], 1);
        assert!(core["metadata"].get("uid").is_none());
        let back = mirror("", &core);
        for k in ["regarding", "reason", "note", "type", "reportingController"] {
            assert_eq!(back[k], new[k], "{k}");
        }
    }
}
