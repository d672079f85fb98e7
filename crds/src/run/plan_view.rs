//! A plan as people read it before they approve it, as HCP Terraform's structured run
//! output shows it: the resources grouped by what happens to them, each with the
//! attributes that change (before → after), why a resource is replaced and which
//! attributes force it, the outputs, and what changed outside of Terraform (drift). Made
//! from the redacted JSON plan ([`super::redact`]): a value its sensitivity masks mark is
//! shown as "(sensitive value)", never as its marker, and an unknown one as "(known
//! after apply)".

use serde_json::Value;

/// At most this many resources (of changes and of drift each) are shown.
pub const MAX_RESOURCES: usize = 500;
/// At most this many attributes of one resource are shown.
pub const MAX_ATTRIBUTES: usize = 200;
/// A shown value is cut at this many characters.
pub const MAX_VALUE_CHARS: usize = 1_000;
/// Nested values deeper than this are shown whole (as compact JSON).
const MAX_DEPTH: usize = 8;

/// What happens to a resource or an output.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Action {
    Create,
    Update,
    Replace,
    Delete,
    Read,
}

impl Action {
    /// The action of a change's `actions` list (None: no-op, or unknown).
    pub fn of(actions: &Value) -> Option<Action> {
        let list: Vec<&str> = actions
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        match list.as_slice() {
            ["create"] => Some(Action::Create),
            ["update"] => Some(Action::Update),
            ["delete"] => Some(Action::Delete),
            ["read"] => Some(Action::Read),
            ["delete", "create"] | ["create", "delete"] => Some(Action::Replace),
            _ => None,
        }
    }

    /// The word of a plan ("will be created").
    pub fn planned(self) -> &'static str {
        match self {
            Action::Create => "will be created",
            Action::Update => "will be updated in-place",
            Action::Replace => "must be replaced",
            Action::Delete => "will be destroyed",
            Action::Read => "will be read during apply",
        }
    }

    /// The word of an applied change ("created").
    pub fn applied(self) -> &'static str {
        match self {
            Action::Create => "created",
            Action::Update => "updated in-place",
            Action::Replace => "replaced",
            Action::Delete => "destroyed",
            Action::Read => "read",
        }
    }

    /// The CLI's symbol.
    pub fn symbol(self) -> &'static str {
        match self {
            Action::Create => "+",
            Action::Update => "~",
            Action::Replace => "-/+",
            Action::Delete => "-",
            Action::Read => "<=",
        }
    }

    /// A short name (CSS classes, element IDs).
    pub fn name(self) -> &'static str {
        match self {
            Action::Create => "create",
            Action::Update => "update",
            Action::Replace => "replace",
            Action::Delete => "delete",
            Action::Read => "read",
        }
    }
}

/// One attribute's change: its path (`tags.owner`, `ports[0]`), its value before and
/// after (None: absent), and whether changing it forces the resource's replacement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttributeChange {
    pub path: String,
    pub before: Option<String>,
    pub after: Option<String>,
    pub forces_replacement: bool,
}

/// A resource's change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceChange {
    pub address: String,
    pub action: Action,
    /// Why, in words, where the plan says (a replacement, a deletion, a read).
    pub reason: Option<String>,
    pub attributes: Vec<AttributeChange>,
    /// Attributes left out: unchanged ones of an update, and those past
    /// [`MAX_ATTRIBUTES`].
    pub hidden: usize,
}

/// An output's change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutputChange {
    pub name: String,
    pub action: Action,
    pub before: Option<String>,
    pub after: Option<String>,
}

/// The plan as shown.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PlanView {
    /// Resource changes, grouped by action (create, update, replace, delete, read), each
    /// group by address.
    pub resources: Vec<ResourceChange>,
    pub outputs: Vec<OutputChange>,
    /// Changes made outside of Terraform since the last run.
    pub drift: Vec<ResourceChange>,
    /// Resources left out past [`MAX_RESOURCES`].
    pub hidden_resources: usize,
}

impl PlanView {
    /// Whether it changes no resource and no output (drift aside).
    pub fn changes_nothing(&self) -> bool {
        self.resources.is_empty() && self.outputs.is_empty()
    }

    /// Whether the plan changes nothing.
    pub fn is_empty(&self) -> bool {
        self.resources.is_empty() && self.outputs.is_empty() && self.drift.is_empty()
    }
}

/// The view of redacted JSON plan `plan`.
pub fn view(plan: &Value) -> PlanView {
    let (changes, hidden_a) = resources(plan.get("resource_changes"), false);
    let (drift, hidden_b) = resources(plan.get("resource_drift"), true);
    let mut outputs: Vec<OutputChange> = plan
        .get("output_changes")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(name, c)| {
            let action = Action::of(&c["actions"])?;
            let whole = |v: &str, m: &str, unknown: Option<&str>| {
                let value = c.get(v)?;
                let unknown = unknown.map_or(&Value::Null, |u| c.get(u).unwrap_or(&Value::Null));
                (!value.is_null() || unknown == &Value::Bool(true))
                    .then(|| shown(value, c.get(m).unwrap_or(&Value::Null), unknown))
            };
            Some(OutputChange {
                name: name.clone(),
                action,
                before: whole("before", "before_sensitive", None),
                after: whole("after", "after_sensitive", Some("after_unknown")),
            })
        })
        .collect();
    outputs.sort_by(|a, b| (a.action, &a.name).cmp(&(b.action, &b.name)));
    PlanView {
        resources: changes,
        outputs,
        drift,
        hidden_resources: hidden_a + hidden_b,
    }
}

fn resources(list: Option<&Value>, drift: bool) -> (Vec<ResourceChange>, usize) {
    let mut out: Vec<ResourceChange> = list
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|rc| resource(rc, drift))
        .collect();
    out.sort_by(|a, b| (a.action, &a.address).cmp(&(b.action, &b.address)));
    let hidden = out.len().saturating_sub(MAX_RESOURCES);
    out.truncate(MAX_RESOURCES);
    (out, hidden)
}

fn resource(rc: &Value, drift: bool) -> Option<ResourceChange> {
    let change = rc.get("change")?;
    let action = Action::of(&change["actions"])?;
    let address = rc.get("address").and_then(Value::as_str)?.to_owned();
    let replace_paths: Vec<String> = change
        .get("replace_paths")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(path_of_steps)
        .collect();
    let null = Value::Null;
    let mut leaves = Vec::new();
    walk(
        String::new(),
        Side {
            value: change.get("before").unwrap_or(&null),
            sensitive: change.get("before_sensitive").unwrap_or(&null),
            unknown: &null,
        },
        Side {
            value: change.get("after").unwrap_or(&null),
            sensitive: change.get("after_sensitive").unwrap_or(&null),
            unknown: change.get("after_unknown").unwrap_or(&null),
        },
        0,
        &mut leaves,
    );
    let shows_all = matches!(action, Action::Create | Action::Delete | Action::Read);
    let mut attributes = Vec::new();
    let mut hidden = 0;
    for leaf in leaves {
        let changed = leaf.changed;
        let present = match action {
            Action::Delete => leaf.before.is_some(),
            _ => leaf.after.is_some() || leaf.before.is_some(),
        };
        if !present {
            continue;
        }
        if !(shows_all || changed) {
            hidden += 1;
            continue;
        }
        if attributes.len() >= MAX_ATTRIBUTES {
            hidden += 1;
            continue;
        }
        let forces_replacement = replace_paths.iter().any(|p| {
            leaf.path == *p
                || leaf.path.starts_with(&format!("{p}."))
                || leaf.path.starts_with(&format!("{p}["))
        });
        attributes.push(AttributeChange {
            path: leaf.path,
            before: if action == Action::Create {
                None
            } else {
                leaf.before
            },
            after: if action == Action::Delete {
                None
            } else {
                leaf.after
            },
            forces_replacement,
        });
    }
    let reason = if drift {
        Some("changed outside of Terraform".to_owned())
    } else {
        rc.get("action_reason")
            .and_then(Value::as_str)
            .and_then(reason_words)
            .map(str::to_owned)
    };
    Some(ResourceChange {
        address,
        action,
        reason,
        attributes,
        hidden,
    })
}

/// The words of a plan's `action_reason`.
fn reason_words(reason: &str) -> Option<&'static str> {
    Some(match reason {
        "replace_because_cannot_update" => "an attribute that cannot be updated in-place changes",
        "replace_because_tainted" => "it is tainted",
        "replace_by_request" => "-replace asked for it",
        "replace_by_triggers" => "its replace_triggered_by references changed",
        "delete_because_no_resource_config" => "its configuration was removed",
        "delete_because_no_module" => "its module was removed",
        "delete_because_wrong_repetition" => "it no longer uses count or for_each as before",
        "delete_because_count_index" => "its count index is out of range",
        "delete_because_each_key" => "its for_each key no longer exists",
        "delete_because_no_move_target" => "its moved target does not exist",
        "read_because_config_unknown" => {
            "its configuration depends on values known only after apply"
        }
        "read_because_dependency_pending" => "it depends on changes pending in this plan",
        "read_because_check_nested" => "a check block reads it",
        _ => return None,
    })
}

/// A `replace_paths` entry (`["tags", "owner"]`, `["ports", 0]`) as a path.
fn path_of_steps(steps: &Value) -> String {
    let mut p = String::new();
    for s in steps.as_array().into_iter().flatten() {
        match s {
            Value::Number(n) => p.push_str(&format!("[{n}]")),
            Value::String(k) => push_key(&mut p, k),
            _ => {}
        }
    }
    p
}

fn push_key(p: &mut String, k: &str) {
    if !p.is_empty() {
        p.push('.');
    }
    p.push_str(k);
}

/// One side of a change at one path: its value and its masks there.
#[derive(Clone, Copy)]
struct Side<'a> {
    value: &'a Value,
    sensitive: &'a Value,
    unknown: &'a Value,
}

impl<'a> Side<'a> {
    fn at_key(&self, k: &str) -> Side<'a> {
        Side {
            value: self.value.get(k).unwrap_or(&Value::Null),
            sensitive: self.sensitive.get(k).unwrap_or(&Value::Null),
            unknown: self.unknown.get(k).unwrap_or(&Value::Null),
        }
    }

    fn at_index(&self, i: usize) -> Side<'a> {
        Side {
            value: self.value.get(i).unwrap_or(&Value::Null),
            sensitive: self.sensitive.get(i).unwrap_or(&Value::Null),
            unknown: self.unknown.get(i).unwrap_or(&Value::Null),
        }
    }

    /// Shown whole here (a leaf): sensitive, unknown, or not a container.
    fn is_leaf(&self, depth: usize) -> bool {
        self.sensitive == &Value::Bool(true)
            || self.unknown == &Value::Bool(true)
            || depth >= MAX_DEPTH
            || !(self.value.is_object() || self.value.is_array())
            || self.value.as_object().is_some_and(|o| o.is_empty())
            || self.value.as_array().is_some_and(|a| a.is_empty())
    }

    /// The value as shown (None: absent).
    fn shown(&self) -> Option<String> {
        (!self.value.is_null() || self.unknown == &Value::Bool(true))
            .then(|| shown(self.value, self.sensitive, self.unknown))
    }
}

struct Leaf {
    path: String,
    before: Option<String>,
    after: Option<String>,
    /// The values differ (a sensitive value's marker changes with it, so a change of a
    /// masked value still shows).
    changed: bool,
}

fn walk(path: String, before: Side<'_>, after: Side<'_>, depth: usize, out: &mut Vec<Leaf>) {
    let both_objects = before.value.is_object() || after.value.is_object();
    let both_arrays = before.value.is_array() || after.value.is_array();
    if (before.is_leaf(depth) && after.is_leaf(depth))
        || !(both_objects || both_arrays)
        || (before.value.is_object() && after.value.is_array())
        || (before.value.is_array() && after.value.is_object())
        || before.sensitive == &Value::Bool(true)
        || after.sensitive == &Value::Bool(true)
        || after.unknown == &Value::Bool(true)
    {
        if path.is_empty() {
            return;
        }
        out.push(Leaf {
            path,
            before: before.shown(),
            after: after.shown(),
            changed: before.value != after.value || after.unknown == &Value::Bool(true),
        });
        return;
    }
    if both_objects {
        let mut keys: Vec<&String> = before
            .value
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, _)| k)
            .chain(
                after
                    .value
                    .as_object()
                    .into_iter()
                    .flatten()
                    .map(|(k, _)| k),
            )
            .collect();
        // Keys known only through the unknown mask (an attribute computed at apply).
        keys.extend(
            after
                .unknown
                .as_object()
                .into_iter()
                .flatten()
                .map(|(k, _)| k),
        );
        keys.sort();
        keys.dedup();
        for k in keys {
            let mut p = path.clone();
            push_key(&mut p, k);
            walk(p, before.at_key(k), after.at_key(k), depth + 1, out);
        }
    } else {
        let n = before
            .value
            .as_array()
            .map_or(0, Vec::len)
            .max(after.value.as_array().map_or(0, Vec::len))
            .max(after.unknown.as_array().map_or(0, Vec::len));
        for i in 0..n {
            walk(
                format!("{path}[{i}]"),
                before.at_index(i),
                after.at_index(i),
                depth + 1,
                out,
            );
        }
    }
}

/// A value as shown: "(sensitive value)" where its mask says so, "(known after apply)"
/// where it is unknown, else its JSON (strings quoted), cut at [`MAX_VALUE_CHARS`].
pub fn shown(value: &Value, sensitive: &Value, unknown: &Value) -> String {
    if sensitive == &Value::Bool(true) {
        return "(sensitive value)".to_owned();
    }
    if unknown == &Value::Bool(true) {
        return "(known after apply)".to_owned();
    }
    if contains_true(sensitive) {
        // A container holding a sensitive part, shown whole (past the depth limit).
        return "(sensitive value)".to_owned();
    }
    let text = value.to_string();
    if text.chars().count() > MAX_VALUE_CHARS {
        let cut: String = text.chars().take(MAX_VALUE_CHARS).collect();
        format!("{cut}…")
    } else {
        text
    }
}

fn contains_true(mask: &Value) -> bool {
    match mask {
        Value::Bool(b) => *b,
        Value::Array(a) => a.iter().any(contains_true),
        Value::Object(o) => o.values().any(contains_true),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn attr(path: &str, before: Option<&str>, after: Option<&str>) -> AttributeChange {
        AttributeChange {
            path: path.to_owned(),
            before: before.map(str::to_owned),
            after: after.map(str::to_owned),
            forces_replacement: false,
        }
    }

    #[test]
    fn actions_of_the_plans_lists() {
        for (actions, want) in [
            (json!(["create"]), Some(Action::Create)),
            (json!(["update"]), Some(Action::Update)),
            (json!(["delete", "create"]), Some(Action::Replace)),
            (json!(["create", "delete"]), Some(Action::Replace)),
            (json!(["delete"]), Some(Action::Delete)),
            (json!(["read"]), Some(Action::Read)),
            (json!(["no-op"]), None),
            (json!("create"), None),
        ] {
            assert_eq!(Action::of(&actions), want, "{actions}");
        }
    }

    /// An update shows only what changes, before → after, and counts the rest; a nested
    /// map's keys are paths of their own.
    #[test]
    fn an_update_shows_the_attributes_that_change() {
        let plan = json!({"resource_changes": [{
            "address": "terraform_data.app",
            "change": {
                "actions": ["update"],
                "before": {"id": "x", "input": "v1", "tags": {"owner": "a", "team": "b"}},
                "after": {"id": "x", "input": "v2", "tags": {"owner": "c", "team": "b"}},
                "after_unknown": {"output": true},
                "before_sensitive": {}, "after_sensitive": {}
            }
        }]});
        let v = view(&plan);
        let r = &v.resources[0];
        assert_eq!(
            (r.address.as_str(), r.action),
            ("terraform_data.app", Action::Update)
        );
        assert_eq!(
            r.attributes,
            vec![
                attr("input", Some("\"v1\""), Some("\"v2\"")),
                attr("output", None, Some("(known after apply)")),
                attr("tags.owner", Some("\"a\""), Some("\"c\"")),
            ]
        );
        assert_eq!(r.hidden, 2, "id and tags.team are unchanged");
    }

    /// Sensitive values never show, not even as the redacted plan's markers; a change of
    /// one still shows that it changes.
    #[test]
    fn sensitive_values_are_masked() {
        let plan = json!({"resource_changes": [{
            "address": "aws_db_instance.db",
            "change": {
                "actions": ["update"],
                "before": {"password": "marker-1", "name": "db", "opts": {"k": "marker-3"}},
                "after": {"password": "marker-2", "name": "db", "opts": {"k": "marker-4"}},
                "before_sensitive": {"password": true, "opts": {"k": true}},
                "after_sensitive": {"password": true, "opts": {"k": true}},
                "after_unknown": {}
            }
        }], "output_changes": {"secret": {
            "actions": ["create"], "before": null, "after": "marker-5",
            "after_unknown": false, "before_sensitive": false, "after_sensitive": true
        }}});
        let v = view(&plan);
        let shown = format!("{v:?}");
        assert!(!shown.contains("marker"), "{shown}");
        assert_eq!(
            v.resources[0].attributes,
            vec![
                attr(
                    "opts.k",
                    Some("(sensitive value)"),
                    Some("(sensitive value)")
                ),
                attr(
                    "password",
                    Some("(sensitive value)"),
                    Some("(sensitive value)")
                ),
            ]
        );
        assert_eq!(v.outputs[0].after.as_deref(), Some("(sensitive value)"));
        assert_eq!(v.outputs[0].before, None);
    }

    /// A replacement says why and which attribute forces it; creations list every value
    /// set, deletions what there was; groups come in the CLI's order.
    #[test]
    fn replacements_say_why_and_groups_come_in_order() {
        let plan = json!({"resource_changes": [
            {"address": "b.gone", "action_reason": "delete_because_no_resource_config",
             "change": {"actions": ["delete"], "before": {"id": "1", "n": null}, "after": null}},
            {"address": "a.server", "action_reason": "replace_because_cannot_update",
             "change": {"actions": ["delete", "create"],
                "before": {"ami": "ami-1", "id": "i-1"}, "after": {"ami": "ami-2"},
                "after_unknown": {"id": true}, "replace_paths": [["ami"]]}},
            {"address": "c.new", "change": {"actions": ["create"], "before": null,
                "after": {"ports": [80, 443], "name": "web", "none": null}, "after_unknown": {}}},
            {"address": "d.same", "change": {"actions": ["no-op"], "before": {}, "after": {}}}
        ], "resource_drift": [
            {"address": "c.old", "change": {"actions": ["update"], "before": {"x": 1}, "after": {"x": 2}}}
        ]});
        let v = view(&plan);
        let order: Vec<(&str, Action)> = v
            .resources
            .iter()
            .map(|r| (r.address.as_str(), r.action))
            .collect();
        assert_eq!(
            order,
            [
                ("c.new", Action::Create),
                ("a.server", Action::Replace),
                ("b.gone", Action::Delete)
            ]
        );
        assert_eq!(
            v.resources[0].attributes,
            vec![
                attr("name", None, Some("\"web\"")),
                attr("ports[0]", None, Some("80")),
                attr("ports[1]", None, Some("443")),
            ]
        );
        let server = &v.resources[1];
        assert_eq!(
            server.reason.as_deref(),
            Some("an attribute that cannot be updated in-place changes")
        );
        assert_eq!(
            server.attributes[0],
            AttributeChange {
                forces_replacement: true,
                ..attr("ami", Some("\"ami-1\""), Some("\"ami-2\""))
            }
        );
        assert_eq!(
            server.attributes[1],
            attr("id", Some("\"i-1\""), Some("(known after apply)"))
        );
        assert_eq!(
            v.resources[2].attributes,
            vec![attr("id", Some("\"1\""), None)]
        );
        assert_eq!(
            v.resources[2].reason.as_deref(),
            Some("its configuration was removed")
        );
        assert_eq!(
            v.drift[0].reason.as_deref(),
            Some("changed outside of Terraform")
        );
        assert_eq!(v.drift[0].attributes, vec![attr("x", Some("1"), Some("2"))]);
        assert!(!v.is_empty());
        assert!(view(&json!({})).is_empty());
    }

    #[test]
    fn long_values_and_many_resources_are_bounded() {
        let long = "x".repeat(MAX_VALUE_CHARS + 10);
        let s = shown(&json!(long), &Value::Null, &Value::Null);
        assert_eq!(s.chars().count(), MAX_VALUE_CHARS + 1);
        let many: Vec<Value> = (0..MAX_RESOURCES + 3)
            .map(|i| json!({"address": format!("r.n{i:04}"), "change": {"actions": ["create"], "after": {}}}))
            .collect();
        let v = view(&json!({"resource_changes": many}));
        assert_eq!((v.resources.len(), v.hidden_resources), (MAX_RESOURCES, 3));
    }
}
