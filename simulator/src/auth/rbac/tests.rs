//! Tests of `rbac`.

use super::*;

fn user(name: &str, groups: &[&str]) -> UserInfo {
    UserInfo {
        username: name.to_string(),
        groups: groups.iter().map(|g| g.to_string()).collect(),
        ..UserInfo::default()
    }
}

fn sa(namespace: &str, name: &str) -> UserInfo {
    user(
        &format!("system:serviceaccount:{namespace}:{name}"),
        &[
            "system:serviceaccounts",
            &format!("system:serviceaccounts:{namespace}"),
            "system:authenticated",
        ],
    )
}

fn cluster_role(name: &str, rules: Value) -> Value {
    json!({"kind": "ClusterRole", "metadata": {"name": name}, "rules": rules})
}

fn role(namespace: &str, name: &str, rules: Value) -> Value {
    json!({"kind": "Role", "metadata": {"name": name, "namespace": namespace}, "rules": rules})
}

fn role_binding(namespace: &str, name: &str, kind: &str, role: &str, subjects: Value) -> Value {
    json!({"kind": "RoleBinding", "metadata": {"name": name, "namespace": namespace},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role},
               "subjects": subjects})
}

fn cluster_role_binding(name: &str, role: &str, subjects: Value) -> Value {
    json!({"kind": "ClusterRoleBinding", "metadata": {"name": name},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
               "subjects": subjects})
}

fn rule(v: Value) -> PolicyRule {
    PolicyRule::deserialize(v).unwrap_or_default()
}

fn res(verb: &str, group: &str, resource: &str, sub: &str, name: &str) -> Attributes {
    Attributes::resource(verb, group, resource, "ns", name).with_subresource(sub)
}

/// Copies kube-apiserver `VerbMatches`: exact verb or `*`; custom verbs such as `lock`
/// are ordinary strings.
#[test]
fn verb_matching() {
    let r = rule(json!({"verbs": ["get", "lock"], "apiGroups": ["*"], "resources": ["*"]}));
    assert!(r.allows(&res("get", "", "pods", "", "")));
    assert!(r.allows(&res("lock", "terrace.dev", "workspaces", "", "w")));
    assert!(!r.allows(&res("list", "", "pods", "", "")));
    assert!(!r.allows(&res("force-unlock", "terrace.dev", "workspaces", "", "w")));
    let all = rule(json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}));
    assert!(all.allows(&res("force-delete", "terrace.dev", "workspaces", "", "w")));
}

/// Copies kube-apiserver `APIGroupMatches`: `""` is the core group, `*` any group.
#[test]
fn api_group_matching() {
    let core = rule(json!({"verbs": ["get"], "apiGroups": [""], "resources": ["*"]}));
    assert!(core.allows(&res("get", "", "pods", "", "")));
    assert!(!core.allows(&res("get", "apps", "deployments", "", "")));
    let terrace = rule(json!({"verbs": ["get"], "apiGroups": ["terrace.dev"], "resources": ["*"]}));
    assert!(terrace.allows(&res("get", "terrace.dev", "workspaces", "", "")));
    assert!(!terrace.allows(&res("get", "", "pods", "", "")));
    let any = rule(json!({"verbs": ["get"], "apiGroups": ["*"], "resources": ["*"]}));
    assert!(any.allows(&res("get", "apps", "deployments", "", "")));
    let none = rule(json!({"verbs": ["get"], "resources": ["*"]}));
    assert!(!none.allows(&res("get", "", "pods", "", "")));
}

/// Copies kube-apiserver `ResourceMatches`: `*`, exact `resource`, exact
/// `resource/subresource`, `*/subresource`; a plain resource does not cover its
/// subresources and `resource/*` is not a wildcard.
#[test]
fn resource_matching() {
    let r = |resources: Value| {
        rule(json!({"verbs": ["*"], "apiGroups": ["*"], "resources": resources}))
    };
    assert!(r(json!(["*"])).allows(&res("get", "", "pods", "log", "p")));
    assert!(r(json!(["pods"])).allows(&res("get", "", "pods", "", "p")));
    assert!(!r(json!(["pods"])).allows(&res("get", "", "pods", "log", "p")));
    assert!(r(json!(["pods/log"])).allows(&res("get", "", "pods", "log", "p")));
    assert!(!r(json!(["pods/log"])).allows(&res("get", "", "pods", "", "p")));
    assert!(r(json!(["*/status"])).allows(&res(
        "update",
        "terrace.dev",
        "workspaces",
        "status",
        "w"
    )));
    assert!(!r(json!(["*/status"])).allows(&res("update", "terrace.dev", "workspaces", "", "w")));
    assert!(!r(json!(["*/status"])).allows(&res("update", "", "pods", "log", "p")));
    assert!(!r(json!(["pods/*"])).allows(&res("get", "", "pods", "log", "p")));
    assert!(!r(json!(["pods/*"])).allows(&res("get", "", "pods", "", "p")));
}

/// Copies kube-apiserver `ResourceNameMatches`: a rule with resourceNames allows get of
/// a listed name but never list/watch/create/deletecollection, which carry no name.
#[test]
fn resource_names_get_vs_list() {
    let r = rule(
        json!({"verbs": ["get", "list", "watch", "create", "deletecollection", "lock"],
                            "apiGroups": ["terrace.dev"], "resources": ["workspaces"],
                            "resourceNames": ["ws-a"]}),
    );
    assert!(r.allows(&res("get", "terrace.dev", "workspaces", "", "ws-a")));
    assert!(r.allows(&res("lock", "terrace.dev", "workspaces", "", "ws-a")));
    assert!(!r.allows(&res("get", "terrace.dev", "workspaces", "", "ws-b")));
    for verb in ["list", "watch", "create", "deletecollection"] {
        assert!(
            !r.allows(&res(verb, "terrace.dev", "workspaces", "", "")),
            "{verb}"
        );
    }
    let any =
        rule(json!({"verbs": ["list"], "apiGroups": ["terrace.dev"], "resources": ["workspaces"]}));
    assert!(any.allows(&res("list", "terrace.dev", "workspaces", "", "")));
}

/// Copies kube-apiserver `NonResourceURLMatches`: `*`, exact path, trailing-`*` prefix;
/// non-resource rules never match resource requests and vice versa.
#[test]
fn non_resource_url_matching() {
    let r = rule(json!({"verbs": ["get"], "nonResourceURLs": ["/healthz", "/apis/*"]}));
    assert!(r.allows(&Attributes::non_resource("get", "/healthz")));
    assert!(!r.allows(&Attributes::non_resource("get", "/healthz/ping")));
    assert!(r.allows(&Attributes::non_resource(
        "get",
        "/apis/terrace.dev/v1alpha1"
    )));
    assert!(r.allows(&Attributes::non_resource("get", "/apis/")));
    assert!(!r.allows(&Attributes::non_resource("get", "/apis")));
    assert!(!r.allows(&Attributes::non_resource("post", "/healthz")));
    let all = rule(json!({"verbs": ["*"], "nonResourceURLs": ["*"]}));
    assert!(all.allows(&Attributes::non_resource("get", "/metrics")));
    assert!(!all.allows(&res("get", "", "pods", "", "")));
    let resources = rule(json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}));
    assert!(!resources.allows(&Attributes::non_resource("get", "/metrics")));
}

/// Copies kube-apiserver: the privileged-group authorizer allows `system:masters`
/// anything, with no reason, even with no bindings at all.
#[test]
fn system_masters_always_allowed() {
    let snap = RbacSnapshot::default();
    let d = snap.authorize(
        &user("admin", &["system:masters", "system:authenticated"]),
        &res("force-delete", "terrace.dev", "workspaces", "", "w"),
    );
    assert_eq!(
        d,
        Decision {
            allowed: true,
            reason: String::new()
        }
    );
    let d = snap.authorize(
        &user("bob", &["system:authenticated"]),
        &res("get", "", "pods", "", ""),
    );
    assert_eq!(
        d,
        Decision {
            allowed: false,
            reason: String::new()
        }
    );
}

/// Copies kube-apiserver RBAC: a RoleBinding to a ClusterRole grants its rules only in
/// the binding's namespace, with the real reason string.
#[test]
fn role_binding_to_cluster_role_is_namespace_scoped() {
    let snap = RbacSnapshot::from_objects([
        cluster_role(
            "terrace-workspace-locker",
            json!([{"verbs": ["get", "lock"],
                "apiGroups": ["terrace.dev"], "resources": ["workspaces"]}]),
        ),
        role_binding(
            "acme",
            "lockers",
            "ClusterRole",
            "terrace-workspace-locker",
            json!([{"kind": "User", "name": "alice"}]),
        ),
    ]);
    let alice = user("alice", &["system:authenticated"]);
    let lock = |ns: &str| Attributes::resource("lock", "terrace.dev", "workspaces", ns, "ws-1");
    let d = snap.authorize(&alice, &lock("acme"));
    assert!(d.allowed);
    assert_eq!(
        d.reason,
        "RBAC: allowed by RoleBinding \"lockers/acme\" of ClusterRole \"terrace-workspace-locker\" to User \"alice\""
    );
    assert!(!snap.authorize(&alice, &lock("other")).allowed);
    assert!(!snap.authorize(&alice, &lock("")).allowed);
    assert!(!snap.authorize(&user("bob", &[]), &lock("acme")).allowed);
}

/// Copies kube-apiserver RBAC: a RoleBinding to a Role uses the Role of the binding's
/// namespace only; a Role of the same name elsewhere does not count.
#[test]
fn role_binding_to_role_uses_its_namespace() {
    let snap = RbacSnapshot::from_objects([
        role(
            "a",
            "reader",
            json!([{"verbs": ["get"], "apiGroups": [""], "resources": ["configmaps"]}]),
        ),
        role(
            "b",
            "reader",
            json!([{"verbs": ["get"], "apiGroups": [""], "resources": ["secrets"]}]),
        ),
        role_binding(
            "a",
            "rb",
            "Role",
            "reader",
            json!([{"kind": "Group", "name": "devs"}]),
        ),
    ]);
    let dev = user("carol", &["devs"]);
    assert!(
        snap.authorize(
            &dev,
            &Attributes::resource("get", "", "configmaps", "a", "x")
        )
        .allowed
    );
    assert!(
        !snap
            .authorize(&dev, &Attributes::resource("get", "", "secrets", "a", "x"))
            .allowed
    );
    assert!(
        !snap
            .authorize(
                &dev,
                &Attributes::resource("get", "", "configmaps", "b", "x")
            )
            .allowed
    );
}

/// Copies kube-apiserver RBAC: a ClusterRoleBinding grants everywhere, cluster-scoped
/// requests included.
#[test]
fn cluster_role_binding_grants_everywhere() {
    let snap = RbacSnapshot::from_objects([
        cluster_role(
            "ns-reader",
            json!([{"verbs": ["get", "list"], "apiGroups": [""], "resources": ["namespaces", "pods"]}]),
        ),
        cluster_role_binding(
            "readers",
            "ns-reader",
            json!([{"kind": "User", "name": "dave"}]),
        ),
    ]);
    let dave = user("dave", &[]);
    let d = snap.authorize(
        &dave,
        &Attributes::resource("list", "", "namespaces", "", ""),
    );
    assert!(d.allowed);
    assert_eq!(
        d.reason,
        "RBAC: allowed by ClusterRoleBinding \"readers\" of ClusterRole \"ns-reader\" to User \"dave\""
    );
    assert!(
        snap.authorize(&dave, &Attributes::resource("get", "", "pods", "any", "p"))
            .allowed
    );
}

/// Copies kube-apiserver RBAC: a ServiceAccount bound in namespace A is not allowed in
/// namespace B; a ServiceAccount subject without namespace means the binding's.
#[test]
fn service_account_subject_scoping() {
    let snap = RbacSnapshot::from_objects([
        cluster_role(
            "edit",
            json!([{"verbs": ["*"], "apiGroups": ["terrace.dev"], "resources": ["*"]}]),
        ),
        role_binding(
            "a",
            "bot",
            "ClusterRole",
            "edit",
            json!([{"kind": "ServiceAccount", "name": "runner", "namespace": "a"}]),
        ),
        role_binding(
            "c",
            "local",
            "ClusterRole",
            "edit",
            json!([{"kind": "ServiceAccount", "name": "runner"}]),
        ),
    ]);
    let attrs = |ns: &str| Attributes::resource("create", "terrace.dev", "testruns", ns, "");
    let runner_a = sa("a", "runner");
    let d = snap.authorize(&runner_a, &attrs("a"));
    assert!(d.allowed);
    assert_eq!(
        d.reason,
        "RBAC: allowed by RoleBinding \"bot/a\" of ClusterRole \"edit\" to ServiceAccount \"runner/a\""
    );
    assert!(!snap.authorize(&runner_a, &attrs("b")).allowed);
    assert!(!snap.authorize(&runner_a, &attrs("c")).allowed);
    assert!(snap.authorize(&sa("c", "runner"), &attrs("c")).allowed);
    assert!(!snap.authorize(&sa("b", "runner"), &attrs("a")).allowed);
    // A user merely named like a group or with the SA's short name is not the SA.
    assert!(!snap.authorize(&user("runner", &[]), &attrs("a")).allowed);
}

/// Copies kube-apiserver RBAC: ServiceAccounts match Group subjects
/// `system:serviceaccounts` and `system:serviceaccounts:<ns>` through their groups.
#[test]
fn service_account_groups_match_group_subjects() {
    let snap = RbacSnapshot::from_objects([
        cluster_role(
            "view",
            json!([{"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}]),
        ),
        cluster_role_binding(
            "sas-of-a",
            "view",
            json!([{"kind": "Group", "name": "system:serviceaccounts:a"}]),
        ),
    ]);
    let get = Attributes::resource("get", "", "pods", "x", "p");
    assert!(snap.authorize(&sa("a", "any"), &get).allowed);
    assert!(!snap.authorize(&sa("b", "any"), &get).allowed);
}

/// Copies kube-apiserver RBAC: a binding whose role is missing grants nothing and its
/// lookup error becomes the denial reason (`RBAC: clusterrole... not found`).
#[test]
fn missing_role_reason() {
    let snap = RbacSnapshot::from_objects([
        role_binding(
            "a",
            "rb",
            "ClusterRole",
            "ghost",
            json!([{"kind": "User", "name": "eve"}]),
        ),
        role_binding(
            "a",
            "rb2",
            "Role",
            "gone",
            json!([{"kind": "User", "name": "eve"}]),
        ),
    ]);
    let d = snap.authorize(
        &user("eve", &[]),
        &Attributes::resource("get", "", "pods", "a", ""),
    );
    assert_eq!(
        d,
        Decision {
            allowed: false,
            reason: "RBAC: [clusterrole.rbac.authorization.k8s.io \"ghost\" not found, \
                         role.rbac.authorization.k8s.io \"gone\" not found]"
                .to_string()
        }
    );
}

/// Copies the clusterrole-aggregation controller: matchLabels and matchExpressions
/// selectors, union of the matched roles' rules without duplicates, nested aggregation.
#[test]
fn cluster_role_aggregation() {
    let labeled = |name: &str, labels: Value, rules: Value| json!({"kind": "ClusterRole", "metadata": {"name": name, "labels": labels}, "rules": rules});
    let read = json!({"verbs": ["get"], "apiGroups": ["terrace.dev"], "resources": ["workspaces"]});
    let lock =
        json!({"verbs": ["lock"], "apiGroups": ["terrace.dev"], "resources": ["workspaces"]});
    let admin = json!({"verbs": ["force-unlock"], "apiGroups": ["terrace.dev"], "resources": ["workspaces"]});
    let snap = RbacSnapshot::from_objects([
        labeled(
            "reader",
            json!({"terrace.dev/aggregate-to-locker": "true"}),
            json!([read]),
        ),
        labeled(
            "locker-extra",
            json!({"tier": "locker"}),
            json!([lock, read]),
        ),
        labeled("unrelated", json!({"tier": "other"}), json!([admin])),
        json!({"kind": "ClusterRole", "metadata": {"name": "locker",
                    "labels": {"terrace.dev/aggregate-to-admin": "true"}},
                   "aggregationRule": {"clusterRoleSelectors": [
                       {"matchLabels": {"terrace.dev/aggregate-to-locker": "true"}},
                       {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["locker"]}]}]},
                   "rules": [{"verbs": ["delete"], "apiGroups": ["*"], "resources": ["*"]}]}),
        json!({"kind": "ClusterRole", "metadata": {"name": "admin"},
                   "aggregationRule": {"clusterRoleSelectors": [
                       {"matchLabels": {"terrace.dev/aggregate-to-admin": "true"}}]}}),
        role_binding(
            "acme",
            "rb",
            "ClusterRole",
            "admin",
            json!([{"kind": "User", "name": "ann"}]),
        ),
    ]);
    // Selector by selector, roles in name order, first occurrence kept.
    assert_eq!(
        snap.cluster_role_rules("locker"),
        Some(vec![read.clone(), lock.clone()])
    );
    assert_eq!(snap.cluster_role_rules("admin"), Some(vec![read, lock]));
    let ann = user("ann", &[]);
    let ws = |verb: &str| Attributes::resource(verb, "terrace.dev", "workspaces", "acme", "w");
    assert!(snap.authorize(&ann, &ws("lock")).allowed);
    assert!(snap.authorize(&ann, &ws("get")).allowed);
    // The aggregated role's own rules are replaced, and unmatched roles do not count.
    assert!(!snap.authorize(&ann, &ws("delete")).allowed);
    assert!(!snap.authorize(&ann, &ws("force-unlock")).allowed);
}

/// Copies apimachinery label selectors: NotIn/DoesNotExist match absent keys, Exists
/// needs the key, an unknown operator matches nothing, an empty selector everything.
#[test]
fn label_selector_operators() {
    let labels: BTreeMap<String, String> = [("a".to_string(), "1".to_string())].into();
    let sel = |v: Value| LabelSelector::deserialize(v).unwrap_or_default();
    let expr = |op: &str, key: &str, values: Value| {
        sel(json!({"matchExpressions": [{"key": key, "operator": op, "values": values}]}))
    };
    assert!(sel(json!({})).matches(&labels));
    assert!(expr("In", "a", json!(["1", "2"])).matches(&labels));
    assert!(!expr("In", "b", json!(["1"])).matches(&labels));
    assert!(expr("NotIn", "b", json!(["1"])).matches(&labels));
    assert!(!expr("NotIn", "a", json!(["1"])).matches(&labels));
    assert!(expr("Exists", "a", json!([])).matches(&labels));
    assert!(!expr("DoesNotExist", "a", json!([])).matches(&labels));
    assert!(expr("DoesNotExist", "b", json!([])).matches(&labels));
    assert!(!expr("Bogus", "a", json!([])).matches(&labels));
    assert!(!sel(json!({"matchLabels": {"a": "2"}})).matches(&labels));
}

/// Copies the bootstrap policy of a real cluster: any authenticated user may read
/// discovery and create SelfSubjectAccessReviews; anonymous users only public info;
/// `cluster-admin` bound to `system:masters`.
#[test]
fn bootstrap_policy_grants() {
    let snap = RbacSnapshot::from_objects(bootstrap_policy());
    let alice = user("alice", &["system:authenticated"]);
    let anon = UserInfo::anonymous();
    let ssar = Attributes::resource(
        "create",
        "authorization.k8s.io",
        "selfsubjectaccessreviews",
        "",
        "",
    );
    let d = snap.authorize(&alice, &ssar);
    assert!(d.allowed);
    assert_eq!(
        d.reason,
        "RBAC: allowed by ClusterRoleBinding \"system:basic-user\" of ClusterRole \"system:basic-user\" to Group \"system:authenticated\""
    );
    assert!(
        snap.authorize(
            &alice,
            &Attributes::non_resource("get", "/apis/terrace.dev/v1alpha1")
        )
        .allowed
    );
    assert!(
        snap.authorize(&alice, &Attributes::non_resource("get", "/openapi/v3"))
            .allowed
    );
    assert!(
        !snap
            .authorize(&alice, &Attributes::non_resource("get", "/metrics"))
            .allowed
    );
    assert!(
        snap.authorize(&anon, &Attributes::non_resource("get", "/version"))
            .allowed
    );
    assert!(
        !snap
            .authorize(&anon, &Attributes::non_resource("get", "/api"))
            .allowed
    );
    assert!(!snap.authorize(&anon, &ssar).allowed);
    assert!(
        !snap
            .authorize(&alice, &Attributes::resource("get", "", "pods", "a", ""))
            .allowed
    );
    // Via the binding itself, not just the privileged-group shortcut.
    let mut visited = Vec::new();
    let mut errors = Vec::new();
    snap.visit_rules(&user("root", &["system:masters"]), "", &mut errors, |v| {
        visited.push(v.source());
        true
    });
    assert!(
        visited
            .iter()
            .any(|s| s.contains("ClusterRoleBinding \"cluster-admin\""))
    );
}

/// Copies kube-apiserver `RulesFor`: cluster-wide and namespace rules of the user, the
/// privileged group's wildcard rules for `system:masters`.
#[test]
fn rules_for_lists_applicable_rules() {
    let snap = RbacSnapshot::from_objects([
        cluster_role(
            "r",
            json!([{"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}]),
        ),
        role_binding(
            "a",
            "rb",
            "ClusterRole",
            "r",
            json!([{"kind": "User", "name": "u"}]),
        ),
    ]);
    let (rules, errors) = snap.rules_for(&user("u", &[]), "a");
    assert_eq!(rules.len(), 1);
    assert!(errors.is_empty());
    assert!(snap.rules_for(&user("u", &[]), "b").0.is_empty());
    let (rules, _) = snap.rules_for(&user("root", &["system:masters"]), "b");
    assert_eq!(rules[0].resources, vec!["*"]);
    assert_eq!(rules[1].non_resource_urls, vec!["*"]);
}

/// Copies kube-apiserver: malformed RBAC objects (wrong types) do not break the
/// authorizer; they are skipped.
#[test]
fn malformed_objects_are_skipped() {
    let snap = RbacSnapshot::from_objects([
        json!({"kind": "ClusterRole", "metadata": {"name": "bad"}, "rules": "nope"}),
        json!({"kind": "ClusterRoleBinding", "metadata": {"name": "b"}, "subjects": 3}),
        cluster_role(
            "ok",
            json!([{"verbs": ["get"], "resources": ["pods"], "apiGroups": null}]),
        ),
    ]);
    assert!(snap.cluster_role_rules("bad").is_none());
    assert!(snap.cluster_role_rules("ok").is_some());
}
