//! RBAC evaluation: the Roles, ClusterRoles, RoleBindings and ClusterRoleBindings of the
//! store, frozen into an [`RbacSnapshot`], answer "may this user do this?".
//!
//! It copies kube-apiserver's authorizer chain as far as terrace needs it: the
//! privileged-group authorizer (`system:masters` may do anything) followed by the RBAC
//! authorizer (`plugin/pkg/auth/authorizer/rbac`), which visits the rules of every
//! ClusterRoleBinding and, for namespaced requests, every RoleBinding of the request's
//! namespace that names the user, and allows on the first matching rule. Nothing ever
//! denies: "not allowed" is RBAC's "no opinion". ClusterRole aggregation, done in a real
//! cluster by the clusterrole-aggregation controller writing `rules`, is resolved when the
//! snapshot is built (and [`RbacSnapshot::cluster_role_rules`] gives the result for a
//! server that wants to write it back like the controller does).
//!
//! Objects are read from JSON so the server can pass what it stores; malformed objects
//! are skipped (a binding whose role cannot be found contributes a resolution error to the
//! reason, as real).

use std::borrow::Borrow;
use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{Value, json};

use super::{
    SYSTEM_MASTERS, UserInfo, aggregate_message, null_as_default, split_service_account_username,
};

/// What a request wants to do, as the authorizer sees it (`authorizer.Attributes`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Attributes {
    pub verb: String,
    pub api_group: String,
    pub resource: String,
    pub subresource: String,
    pub name: String,
    pub namespace: String,
    /// The URL path, for non-resource requests.
    pub path: String,
    pub resource_request: bool,
}

impl Attributes {
    /// A resource request (`subresource` empty; set the field for subresources).
    pub fn resource(
        verb: &str,
        api_group: &str,
        resource: &str,
        namespace: &str,
        name: &str,
    ) -> Self {
        Attributes {
            verb: verb.to_string(),
            api_group: api_group.to_string(),
            resource: resource.to_string(),
            namespace: namespace.to_string(),
            name: name.to_string(),
            resource_request: true,
            ..Attributes::default()
        }
    }

    /// A non-resource request such as `get /healthz`.
    pub fn non_resource(verb: &str, path: &str) -> Self {
        Attributes {
            verb: verb.to_string(),
            path: path.to_string(),
            resource_request: false,
            ..Attributes::default()
        }
    }

    /// The same attributes with a subresource.
    pub fn with_subresource(mut self, subresource: &str) -> Self {
        self.subresource = subresource.to_string();
        self
    }
}

/// An authorizer's answer. RBAC never denies outright, so `allowed == false` is
/// "no opinion"; `reason` is what a SubjectAccessReview reports in `status.reason`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    pub allowed: bool,
    pub reason: String,
}

/// `rbac/v1` PolicyRule.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyRule {
    #[serde(default, deserialize_with = "null_as_default")]
    pub verbs: Vec<String>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub api_groups: Vec<String>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub resources: Vec<String>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub resource_names: Vec<String>,
    #[serde(
        default,
        rename = "nonResourceURLs",
        deserialize_with = "null_as_default"
    )]
    pub non_resource_urls: Vec<String>,
}

impl PolicyRule {
    /// The rule as `rbac/v1` JSON (empty lists left out, as the API server encodes them).
    pub fn to_json(&self) -> Value {
        let mut rule = serde_json::Map::new();
        for (key, list) in [
            ("apiGroups", &self.api_groups),
            ("nonResourceURLs", &self.non_resource_urls),
            ("resourceNames", &self.resource_names),
            ("resources", &self.resources),
        ] {
            if !list.is_empty() {
                rule.insert(key.to_string(), json!(list));
            }
        }
        rule.insert("verbs".to_string(), json!(self.verbs));
        Value::Object(rule)
    }

    /// `RuleAllows`: whether this rule covers the request.
    pub fn allows(&self, attrs: &Attributes) -> bool {
        if attrs.resource_request {
            let combined = if attrs.subresource.is_empty() {
                attrs.resource.clone()
            } else {
                format!("{}/{}", attrs.resource, attrs.subresource)
            };
            self.verb_matches(&attrs.verb)
                && self.api_group_matches(&attrs.api_group)
                && self.resource_matches(&combined, &attrs.subresource)
                && self.resource_name_matches(&attrs.name)
        } else {
            self.verb_matches(&attrs.verb) && self.non_resource_url_matches(&attrs.path)
        }
    }

    fn verb_matches(&self, verb: &str) -> bool {
        self.verbs.iter().any(|v| v == "*" || v == verb)
    }

    fn api_group_matches(&self, group: &str) -> bool {
        self.api_groups.iter().any(|g| g == "*" || g == group)
    }

    /// Exact `resource[/subresource]`, `*`, or `*/subresource`; `resource/*` is a literal
    /// (real RBAC has no such wildcard).
    fn resource_matches(&self, combined: &str, subresource: &str) -> bool {
        self.resources.iter().any(|r| {
            r == "*"
                || r == combined
                || (!subresource.is_empty() && r.strip_prefix("*/") == Some(subresource))
        })
    }

    /// Empty `resourceNames` match any name; otherwise the request must name one of them,
    /// so list, watch, create and deletecollection (which carry no name) never match.
    fn resource_name_matches(&self, name: &str) -> bool {
        self.resource_names.is_empty() || self.resource_names.iter().any(|n| n == name)
    }

    fn non_resource_url_matches(&self, path: &str) -> bool {
        self.non_resource_urls.iter().any(|u| {
            u == "*"
                || u == path
                || u.strip_suffix('*')
                    .is_some_and(|prefix| path.starts_with(prefix.trim_end_matches('*')))
        })
    }
}

#[derive(Clone, Debug, Default, Deserialize)]
struct Meta {
    #[serde(default, deserialize_with = "null_as_default")]
    name: String,
    #[serde(default, deserialize_with = "null_as_default")]
    namespace: String,
    #[serde(default, deserialize_with = "null_as_default")]
    labels: BTreeMap<String, String>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct LabelSelectorRequirement {
    key: String,
    operator: String,
    #[serde(default, deserialize_with = "null_as_default")]
    values: Vec<String>,
}

/// `metav1.LabelSelector`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct LabelSelector {
    #[serde(default, deserialize_with = "null_as_default")]
    match_labels: BTreeMap<String, String>,
    #[serde(default, deserialize_with = "null_as_default")]
    match_expressions: Vec<LabelSelectorRequirement>,
}

impl LabelSelector {
    /// `LabelSelectorAsSelector(..).Matches`: all requirements must hold (an empty selector
    /// matches everything); an unknown operator makes the selector invalid, matching nothing.
    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let labels_ok = self
            .match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v));
        labels_ok
            && self.match_expressions.iter().all(|req| {
                let value = labels.get(&req.key);
                match req.operator.as_str() {
                    "In" => value.is_some_and(|v| req.values.contains(v)),
                    "NotIn" => value.is_none_or(|v| !req.values.contains(v)),
                    "Exists" => value.is_some(),
                    "DoesNotExist" => value.is_none(),
                    _ => false,
                }
            })
    }
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct AggregationRule {
    #[serde(default, deserialize_with = "null_as_default")]
    cluster_role_selectors: Vec<LabelSelector>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RoleObject {
    #[serde(default)]
    metadata: Meta,
    #[serde(default, deserialize_with = "null_as_default")]
    rules: Vec<PolicyRule>,
    #[serde(default)]
    aggregation_rule: Option<AggregationRule>,
}

/// `rbac/v1` Subject.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Subject {
    #[serde(default, deserialize_with = "null_as_default")]
    pub kind: String,
    #[serde(default, deserialize_with = "null_as_default")]
    pub name: String,
    #[serde(default, deserialize_with = "null_as_default")]
    pub namespace: String,
}

#[derive(Clone, Debug, Default, Deserialize)]
struct RoleRef {
    #[serde(default)]
    kind: String,
    #[serde(default)]
    name: String,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Binding {
    #[serde(default)]
    metadata: Meta,
    #[serde(default, deserialize_with = "null_as_default")]
    subjects: Vec<Subject>,
    role_ref: RoleRef,
}

impl Binding {
    /// `appliesTo`: the first subject naming the user. A ServiceAccount subject without a
    /// namespace means the binding's namespace.
    fn subject_for(&self, user: &UserInfo, namespace: &str) -> Option<&Subject> {
        self.subjects.iter().find(|s| match s.kind.as_str() {
            "User" => user.username == s.name,
            "Group" => user.groups.contains(&s.name),
            "ServiceAccount" => {
                let sa_namespace = if s.namespace.is_empty() {
                    namespace
                } else {
                    s.namespace.as_str()
                };
                !sa_namespace.is_empty()
                    && split_service_account_username(&user.username)
                        == Some((sa_namespace, s.name.as_str()))
            }
            _ => false,
        })
    }
}

/// `describeSubject`: `User "alice"`, `ServiceAccount "name/namespace"`.
fn describe_subject(subject: &Subject, binding_namespace: &str) -> String {
    if subject.kind == "ServiceAccount" {
        let ns = if subject.namespace.is_empty() {
            binding_namespace
        } else {
            &subject.namespace
        };
        format!("{} \"{}/{}\"", subject.kind, subject.name, ns)
    } else {
        format!("{} {}", subject.kind, super::go_quote(&subject.name))
    }
}

/// The RBAC objects of the cluster at one moment, indexed for authorization.
#[derive(Clone, Debug, Default)]
pub struct RbacSnapshot {
    /// `(namespace, name)` → rules.
    roles: BTreeMap<(String, String), Vec<PolicyRule>>,
    /// name → effective rules (aggregation resolved).
    cluster_roles: BTreeMap<String, Vec<PolicyRule>>,
    /// namespace → bindings, sorted by name.
    role_bindings: BTreeMap<String, Vec<Binding>>,
    cluster_role_bindings: Vec<Binding>,
}

/// One rule that applies to a user, and where it came from (for the reason string).
struct Visit<'a> {
    binding: &'a Binding,
    subject: &'a Subject,
    cluster_wide: bool,
    rule: &'a PolicyRule,
}

impl Visit<'_> {
    /// The real describers: `ClusterRoleBinding "b" of ClusterRole "r" to User "u"`,
    /// `RoleBinding "b/ns" of Role "r" to ServiceAccount "sa/ns"`.
    fn source(&self) -> String {
        let b = self.binding;
        let binding = if self.cluster_wide {
            format!("ClusterRoleBinding {}", super::go_quote(&b.metadata.name))
        } else {
            format!(
                "RoleBinding \"{}/{}\"",
                b.metadata.name, b.metadata.namespace
            )
        };
        format!(
            "{binding} of {} {} to {}",
            b.role_ref.kind,
            super::go_quote(&b.role_ref.name),
            describe_subject(self.subject, &b.metadata.namespace)
        )
    }
}

impl RbacSnapshot {
    /// Builds the snapshot from the four kinds' objects as JSON. Objects that do not parse
    /// as their kind are left out.
    pub fn new<V: Borrow<Value>>(
        roles: impl IntoIterator<Item = V>,
        cluster_roles: impl IntoIterator<Item = V>,
        role_bindings: impl IntoIterator<Item = V>,
        cluster_role_bindings: impl IntoIterator<Item = V>,
    ) -> Self {
        let mut snapshot = RbacSnapshot::default();
        for role in roles {
            if let Ok(r) = RoleObject::deserialize(role.borrow()) {
                snapshot
                    .roles
                    .insert((r.metadata.namespace, r.metadata.name), r.rules);
            }
        }
        let cluster_roles: Vec<RoleObject> = cluster_roles
            .into_iter()
            .filter_map(|v| RoleObject::deserialize(v.borrow()).ok())
            .collect();
        snapshot.cluster_roles = aggregate(&cluster_roles);
        for binding in role_bindings {
            if let Ok(b) = Binding::deserialize(binding.borrow()) {
                snapshot
                    .role_bindings
                    .entry(b.metadata.namespace.clone())
                    .or_default()
                    .push(b);
            }
        }
        for bindings in snapshot.role_bindings.values_mut() {
            bindings.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        }
        snapshot.cluster_role_bindings = cluster_role_bindings
            .into_iter()
            .filter_map(|v| Binding::deserialize(v.borrow()).ok())
            .collect();
        snapshot
            .cluster_role_bindings
            .sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        snapshot
    }

    /// Builds the snapshot from a mixed collection of RBAC objects, sorted by `kind`;
    /// objects of other kinds are ignored.
    pub fn from_objects<V: Borrow<Value>>(objects: impl IntoIterator<Item = V>) -> Self {
        let mut by_kind: [Vec<Value>; 4] = Default::default();
        for object in objects {
            let object = object.borrow();
            let slot = match object.get("kind").and_then(Value::as_str) {
                Some("Role") => 0,
                Some("ClusterRole") => 1,
                Some("RoleBinding") => 2,
                Some("ClusterRoleBinding") => 3,
                _ => continue,
            };
            by_kind[slot].push(object.clone());
        }
        let [roles, cluster_roles, role_bindings, cluster_role_bindings] = by_kind;
        RbacSnapshot::new(roles, cluster_roles, role_bindings, cluster_role_bindings)
    }

    /// The effective rules of a ClusterRole as JSON: for an aggregated ClusterRole, what the
    /// clusterrole-aggregation controller would write into its `rules`.
    pub fn cluster_role_rules(&self, name: &str) -> Option<Vec<Value>> {
        self.cluster_roles
            .get(name)
            .map(|rules| rules.iter().map(PolicyRule::to_json).collect())
    }

    /// The authorizer chain: `system:masters` first (allowed with an empty reason, as the
    /// privileged-group authorizer answers), then RBAC.
    pub fn authorize(&self, user: &UserInfo, attrs: &Attributes) -> Decision {
        if user.groups.iter().any(|g| g == SYSTEM_MASTERS) {
            return Decision {
                allowed: true,
                reason: String::new(),
            };
        }
        let mut errors = Vec::new();
        let mut allowed_by = None;
        self.visit_rules(user, &attrs.namespace, &mut errors, |visit| {
            if visit.rule.allows(attrs) {
                allowed_by = Some(visit.source());
                false
            } else {
                true
            }
        });
        match allowed_by {
            Some(source) => Decision {
                allowed: true,
                reason: format!("RBAC: allowed by {source}"),
            },
            None => Decision {
                allowed: false,
                reason: if errors.is_empty() {
                    String::new()
                } else {
                    format!("RBAC: {}", aggregate_message(&errors))
                },
            },
        }
    }

    /// `RulesFor`: every rule that applies to `user` in `namespace` (cluster-wide ones
    /// included), `system:masters`' wildcard rules first, plus resolution errors.
    pub fn rules_for(&self, user: &UserInfo, namespace: &str) -> (Vec<PolicyRule>, Vec<String>) {
        let mut rules = Vec::new();
        if user.groups.iter().any(|g| g == SYSTEM_MASTERS) {
            let all = vec!["*".to_string()];
            rules.push(PolicyRule {
                verbs: all.clone(),
                api_groups: all.clone(),
                resources: all.clone(),
                ..PolicyRule::default()
            });
            rules.push(PolicyRule {
                verbs: all.clone(),
                non_resource_urls: all,
                ..PolicyRule::default()
            });
        }
        let mut errors = Vec::new();
        self.visit_rules(user, namespace, &mut errors, |visit| {
            rules.push(visit.rule.clone());
            true
        });
        (rules, errors)
    }

    /// `VisitRulesFor`: ClusterRoleBindings first, then the RoleBindings of `namespace`;
    /// stops when `visitor` returns false.
    fn visit_rules<'a>(
        &'a self,
        user: &UserInfo,
        namespace: &str,
        errors: &mut Vec<String>,
        mut visitor: impl FnMut(Visit<'a>) -> bool,
    ) {
        let cluster = self.cluster_role_bindings.iter().map(|b| (b, true, ""));
        let local = if namespace.is_empty() {
            None
        } else {
            self.role_bindings.get(namespace)
        };
        let local = local.into_iter().flatten().map(|b| (b, false, namespace));
        for (binding, cluster_wide, binding_namespace) in cluster.chain(local) {
            let Some(subject) = binding.subject_for(user, binding_namespace) else {
                continue;
            };
            let rules = match self.role_ref_rules(&binding.role_ref, binding_namespace) {
                Ok(rules) => rules,
                Err(e) => {
                    errors.push(e);
                    continue;
                }
            };
            for rule in rules {
                let visit = Visit {
                    binding,
                    subject,
                    cluster_wide,
                    rule,
                };
                if !visitor(visit) {
                    return;
                }
            }
        }
    }

    /// `GetRoleReferenceRules`, with the listers' NotFound messages.
    fn role_ref_rules(&self, role_ref: &RoleRef, namespace: &str) -> Result<&[PolicyRule], String> {
        match role_ref.kind.as_str() {
            "Role" => self
                .roles
                .get(&(namespace.to_string(), role_ref.name.clone()))
                .map(Vec::as_slice)
                .ok_or_else(|| {
                    format!(
                        "role.rbac.authorization.k8s.io {} not found",
                        super::go_quote(&role_ref.name)
                    )
                }),
            "ClusterRole" => self
                .cluster_roles
                .get(&role_ref.name)
                .map(Vec::as_slice)
                .ok_or_else(|| {
                    format!(
                        "clusterrole.rbac.authorization.k8s.io {} not found",
                        super::go_quote(&role_ref.name)
                    )
                }),
            other => Err(format!(
                "unsupported role reference kind: {}",
                super::go_quote(other)
            )),
        }
    }
}

/// Resolves `aggregationRule`s the way the clusterrole-aggregation controller converges:
/// an aggregated ClusterRole's rules are the de-duplicated rules of every other
/// ClusterRole (in name order) matched by any of its selectors, repeated until nested
/// aggregations settle.
fn aggregate(cluster_roles: &[RoleObject]) -> BTreeMap<String, Vec<PolicyRule>> {
    let mut effective: BTreeMap<String, Vec<PolicyRule>> = cluster_roles
        .iter()
        .map(|r| (r.metadata.name.clone(), r.rules.clone()))
        .collect();
    let mut sorted: Vec<&RoleObject> = cluster_roles.iter().collect();
    sorted.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    for _ in 0..=sorted.len() {
        let mut changed = false;
        for role in &sorted {
            let Some(aggregation) = &role.aggregation_rule else {
                continue;
            };
            let mut rules: Vec<PolicyRule> = Vec::new();
            for selector in &aggregation.cluster_role_selectors {
                for other in &sorted {
                    if other.metadata.name == role.metadata.name
                        || !selector.matches(&other.metadata.labels)
                    {
                        continue;
                    }
                    for rule in effective.get(&other.metadata.name).into_iter().flatten() {
                        if !rules.contains(rule) {
                            rules.push(rule.clone());
                        }
                    }
                }
            }
            if effective.get(&role.metadata.name) != Some(&rules) {
                effective.insert(role.metadata.name.clone(), rules);
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    effective
}

/// The default ClusterRoles and ClusterRoleBindings of a real cluster that matter here
/// (from kube-apiserver's bootstrap policy), for the server to create at startup:
/// `cluster-admin` (bound to `system:masters`), `system:discovery` and `system:basic-user`
/// (bound to `system:authenticated`), `system:public-info-viewer` (bound to
/// `system:authenticated` and `system:unauthenticated`).
pub fn bootstrap_policy() -> Vec<Value> {
    let meta = |name: &str| {
        json!({
            "name": name,
            "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
            "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"},
        })
    };
    let role = |name: &str, rules: Value| {
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": meta(name),
            "rules": rules,
        })
    };
    let binding = |name: &str, groups: &[&str]| {
        let subjects: Vec<Value> = groups
            .iter()
            .map(|g| json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": g}))
            .collect();
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": meta(name),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": subjects,
        })
    };
    vec![
        role(
            "cluster-admin",
            json!([
                {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
                {"nonResourceURLs": ["*"], "verbs": ["*"]},
            ]),
        ),
        role(
            "system:discovery",
            json!([{
                "nonResourceURLs": ["/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez",
                                    "/openapi", "/openapi/*", "/readyz", "/version", "/version/"],
                "verbs": ["get"],
            }]),
        ),
        role(
            "system:basic-user",
            json!([
                {"apiGroups": ["authorization.k8s.io"],
                 "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                 "verbs": ["create"]},
                {"apiGroups": ["authentication.k8s.io"], "resources": ["selfsubjectreviews"],
                 "verbs": ["create"]},
            ]),
        ),
        role(
            "system:public-info-viewer",
            json!([{
                "nonResourceURLs": ["/healthz", "/livez", "/readyz", "/version", "/version/"],
                "verbs": ["get"],
            }]),
        ),
        binding("cluster-admin", &[SYSTEM_MASTERS]),
        binding("system:discovery", &[super::ALL_AUTHENTICATED]),
        binding("system:basic-user", &[super::ALL_AUTHENTICATED]),
        binding(
            "system:public-info-viewer",
            &[super::ALL_AUTHENTICATED, super::ALL_UNAUTHENTICATED],
        ),
    ]
}

#[cfg(test)]
mod tests;
