//! Authentication and authorization end to end: ServiceAccount tokens from TokenRequest,
//! TokenReview, SubjectAccessReview and friends, RBAC on every request, impersonation,
//! ClusterRole aggregation and the bootstrap policy. Clients are real: `kube::Client`
//! over HTTPS (the simulator's `serve`), in-process, and `kubectl` where installed. Each
//! test's doc comment names the kube-apiserver behaviour it copies.

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    LocalSubjectAccessReview, ResourceAttributes, SelfSubjectAccessReview,
    SelfSubjectAccessReviewSpec, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::{Client, Error};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use std::process::Command;
use terrace_simulator::{SimConfig, Simulator};
use tower::ServiceExt;

type R = anyhow::Result<()>;

/// A simulator served over HTTPS on a free loopback port, with its admin client.
struct Served {
    sim: Simulator,
    admin: Client,
    url: String,
    server: tokio::task::JoinHandle<Result<(), terrace_simulator::SimError>>,
}

impl Served {
    async fn start(config: SimConfig) -> anyhow::Result<Served> {
        let sim = Simulator::open(config).await?;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("https://{}", listener.local_addr()?);
        let server = tokio::spawn({
            let sim = sim.clone();
            async move { sim.serve(listener).await }
        });
        let admin = sim.client();
        Ok(Served {
            sim,
            admin,
            url,
            server,
        })
    }

    /// A `kube::Client` over HTTPS presenting `token`.
    async fn client_with_token(&self, token: &str) -> anyhow::Result<Client> {
        let kubeconfig =
            kube::config::Kubeconfig::from_yaml(&self.sim.kubeconfig(&self.url, token))?;
        let config = kube::Config::from_custom_kubeconfig(
            kubeconfig,
            &kube::config::KubeConfigOptions::default(),
        )
        .await?;
        Ok(Client::try_from(config)?)
    }

    async fn stop(self) {
        self.sim.shutdown().await;
        let _ = self.server.await;
    }
}

fn object<T: DeserializeOwned>(v: Value) -> anyhow::Result<T> {
    Ok(serde_json::from_value(v)?)
}

fn api_code<T: std::fmt::Debug>(r: Result<T, Error>) -> (u16, String) {
    match r {
        Err(Error::Api(s)) => (s.code, s.message.clone()),
        other => (0, format!("{other:?}")),
    }
}

async fn create<K>(api: &Api<K>, v: Value) -> anyhow::Result<K>
where
    K: kube::Resource + Clone + DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    Ok(api.create(&PostParams::default(), &object(v)?).await?)
}

async fn namespace(client: &Client, name: &str) -> R {
    create(
        &Api::<Namespace>::all(client.clone()),
        json!({"metadata": {"name": name}}),
    )
    .await?;
    Ok(())
}

async fn service_account(client: &Client, ns: &str, name: &str) -> anyhow::Result<String> {
    let sa = create(
        &Api::<ServiceAccount>::namespaced(client.clone(), ns),
        json!({"metadata": {"name": name}}),
    )
    .await?;
    Ok(sa.metadata.uid.unwrap_or_default())
}

/// `kubectl create token`'s request, through kube-rs.
async fn token_for(client: &Client, ns: &str, name: &str) -> anyhow::Result<String> {
    let tr: TokenRequest = object(json!({"spec": {"audiences": null}}))?;
    let tr = Api::<ServiceAccount>::namespaced(client.clone(), ns)
        .create_token_request(name, &PostParams::default(), &tr)
        .await?;
    Ok(tr.status.map(|s| s.token).unwrap_or_default())
}

/// Namespaces `acme` and `other`; ServiceAccount `acme/reader` bound by a Role in `acme`
/// to get/list ConfigMaps there.
async fn reader_setup(admin: &Client) -> anyhow::Result<String> {
    namespace(admin, "acme").await?;
    namespace(admin, "other").await?;
    let uid = service_account(admin, "acme", "reader").await?;
    create(
        &Api::<Role>::namespaced(admin.clone(), "acme"),
        json!({"metadata": {"name": "cm-reader"},
               "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}]}),
    )
    .await?;
    create(
        &Api::<RoleBinding>::namespaced(admin.clone(), "acme"),
        json!({"metadata": {"name": "reader"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "cm-reader"},
               "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": "acme"}]}),
    )
    .await?;
    Ok(uid)
}

/// Copies kube-apiserver: a token from TokenRequest (`kubectl create token`) authenticates
/// as `system:serviceaccount:<ns>:<name>`, and that user may do exactly what its
/// RoleBinding allows, in that namespace only; denials are 403 with the real wording.
#[tokio::test]
async fn service_account_token_is_limited_to_its_role_binding() -> R {
    let s = Served::start(SimConfig::default()).await?;
    reader_setup(&s.admin).await?;
    let token = token_for(&s.admin, "acme", "reader").await?;
    assert_eq!(token.split('.').count(), 3, "a JWT: {token}");
    let reader = s.client_with_token(&token).await?;

    let in_acme = Api::<ConfigMap>::namespaced(reader.clone(), "acme");
    assert!(in_acme.list(&ListParams::default()).await.is_ok());
    let (code, msg) = api_code(
        Api::<ConfigMap>::namespaced(reader.clone(), "other")
            .list(&ListParams::default())
            .await,
    );
    assert_eq!(code, 403);
    assert_eq!(
        msg,
        "configmaps is forbidden: User \"system:serviceaccount:acme:reader\" cannot list \
         resource \"configmaps\" in API group \"\" in the namespace \"other\""
    );
    let (code, _) = api_code(
        Api::<Secret>::namespaced(reader.clone(), "acme")
            .list(&ListParams::default())
            .await,
    );
    assert_eq!(code, 403);
    let cm: ConfigMap = object(json!({"metadata": {"name": "nope"}, "data": {"a": "b"}}))?;
    let (code, _) = api_code(in_acme.create(&PostParams::default(), &cm).await);
    assert_eq!(code, 403);

    // Removing the binding takes effect on the next request (no stale cache).
    Api::<RoleBinding>::namespaced(s.admin.clone(), "acme")
        .delete("reader", &DeleteParams::default())
        .await?;
    let (code, _) = api_code(in_acme.list(&ListParams::default()).await);
    assert_eq!(code, 403);
    s.stop().await;
    Ok(())
}

/// Copies kube-apiserver's ServiceAccount token validation: a token is only good while
/// its ServiceAccount exists with the uid it was issued for — deleting the account (or
/// recreating it under the same name) makes requests with the token 401 Unauthorized.
#[tokio::test]
async fn deleting_the_service_account_invalidates_its_token() -> R {
    let s = Served::start(SimConfig::default()).await?;
    reader_setup(&s.admin).await?;
    let token = token_for(&s.admin, "acme", "reader").await?;
    let reader = s.client_with_token(&token).await?;
    let in_acme = Api::<ConfigMap>::namespaced(reader.clone(), "acme");
    assert!(in_acme.list(&ListParams::default()).await.is_ok());

    let sas = Api::<ServiceAccount>::namespaced(s.admin.clone(), "acme");
    sas.delete("reader", &DeleteParams::default()).await?;
    let (code, msg) = api_code(in_acme.list(&ListParams::default()).await);
    assert_eq!((code, msg.as_str()), (401, "Unauthorized"));

    service_account(&s.admin, "acme", "reader").await?;
    let (code, _) = api_code(in_acme.list(&ListParams::default()).await);
    assert_eq!(
        code, 401,
        "a new ServiceAccount with the same name has a new uid"
    );
    s.stop().await;
    Ok(())
}

/// Copies kube-apiserver's TokenReview: a good token answers `authenticated: true` with
/// the ServiceAccount's user, uid and groups (and the admin token its static user); a bad
/// one answers `authenticated` unset with the authenticator's error, not an HTTP error.
#[tokio::test]
async fn token_review_of_good_and_bad_tokens() -> R {
    let s = Served::start(SimConfig::default()).await?;
    let uid = reader_setup(&s.admin).await?;
    let token = token_for(&s.admin, "acme", "reader").await?;
    let reviews = Api::<TokenReview>::all(s.admin.clone());
    let review = |t: &str| TokenReview {
        spec: TokenReviewSpec {
            token: Some(t.to_string()),
            audiences: None,
        },
        ..Default::default()
    };

    let good = reviews
        .create(&PostParams::default(), &review(&token))
        .await?;
    let status = good.status.unwrap_or_default();
    assert_eq!(status.authenticated, Some(true));
    let user = status.user.unwrap_or_default();
    assert_eq!(
        user.username.as_deref(),
        Some("system:serviceaccount:acme:reader")
    );
    assert_eq!(user.uid.as_deref(), Some(uid.as_str()));
    assert_eq!(
        user.groups.unwrap_or_default(),
        [
            "system:serviceaccounts",
            "system:serviceaccounts:acme",
            "system:authenticated"
        ]
    );
    assert_eq!(
        status.audiences.unwrap_or_default(),
        ["https://kubernetes.default.svc.cluster.local"]
    );

    let admin = reviews
        .create(&PostParams::default(), &review(&s.sim.admin_token()))
        .await?
        .status
        .unwrap_or_default();
    assert_eq!(admin.authenticated, Some(true));
    let admin_user = admin.user.unwrap_or_default();
    assert_eq!(admin_user.username.as_deref(), Some("admin"));
    assert!(
        admin_user
            .groups
            .unwrap_or_default()
            .contains(&"system:masters".to_string())
    );

    let bad = reviews
        .create(&PostParams::default(), &review("not-a-token"))
        .await?
        .status
        .unwrap_or_default();
    assert_ne!(bad.authenticated, Some(true));
    assert_eq!(bad.error.as_deref(), Some("invalid bearer token"));

    // A ServiceAccount may not review tokens: only what RBAC grants (nothing here).
    let reader = s.client_with_token(&token).await?;
    let (code, _) = api_code(
        Api::<TokenReview>::all(reader)
            .create(&PostParams::default(), &review(&token))
            .await,
    );
    assert_eq!(code, 403);
    s.stop().await;
    Ok(())
}

/// The `terrace-workspace-locker`-like setup: ClusterRole with the custom verb `lock` on
/// `workspaces.terrace.dev`, bound by a RoleBinding in `acme` to ServiceAccount
/// `acme/locker`.
async fn locker_setup(admin: &Client) -> R {
    namespace(admin, "acme").await?;
    namespace(admin, "other").await?;
    service_account(admin, "acme", "locker").await?;
    create(
        &Api::<ClusterRole>::all(admin.clone()),
        json!({"metadata": {"name": "workspace-locker"},
               "rules": [{"apiGroups": ["terrace.dev"], "resources": ["workspaces"], "verbs": ["get", "lock"]}]}),
    )
    .await?;
    create(
        &Api::<RoleBinding>::namespaced(admin.clone(), "acme"),
        json!({"metadata": {"name": "lockers"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "workspace-locker"},
               "subjects": [{"kind": "ServiceAccount", "name": "locker", "namespace": "acme"}]}),
    )
    .await?;
    Ok(())
}

fn lock_attributes(namespace: &str) -> ResourceAttributes {
    ResourceAttributes {
        group: Some("terrace.dev".into()),
        resource: Some("workspaces".into()),
        verb: Some("lock".into()),
        namespace: Some(namespace.into()),
        name: Some("ws-1".into()),
        ..Default::default()
    }
}

/// Copies kube-apiserver's SubjectAccessReview with the RBAC authorizer: a ClusterRole
/// bound by a RoleBinding grants its verbs (custom ones included) in the binding's
/// namespace only; the reason names the binding. LocalSubjectAccessReview and
/// SelfSubjectAccessReview answer the same question for a namespace and for the caller.
#[tokio::test]
async fn custom_verb_cluster_role_bound_in_one_namespace() -> R {
    let s = Served::start(SimConfig::default()).await?;
    locker_setup(&s.admin).await?;
    let sar = |ns: &str| SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some("system:serviceaccount:acme:locker".into()),
            groups: Some(vec![
                "system:serviceaccounts".into(),
                "system:serviceaccounts:acme".into(),
                "system:authenticated".into(),
            ]),
            resource_attributes: Some(lock_attributes(ns)),
            ..Default::default()
        },
        ..Default::default()
    };
    let reviews = Api::<SubjectAccessReview>::all(s.admin.clone());
    let acme = reviews
        .create(&PostParams::default(), &sar("acme"))
        .await?
        .status
        .unwrap_or_default();
    assert!(acme.allowed);
    assert_eq!(
        acme.reason.as_deref(),
        Some(
            "RBAC: allowed by RoleBinding \"lockers/acme\" of ClusterRole \"workspace-locker\" \
             to ServiceAccount \"locker/acme\""
        )
    );
    let other = reviews
        .create(&PostParams::default(), &sar("other"))
        .await?
        .status
        .unwrap_or_default();
    assert!(!other.allowed);

    let local = |ns: &str| -> anyhow::Result<LocalSubjectAccessReview> {
        object(json!({
            "metadata": {"namespace": ns},
            "spec": {"user": "system:serviceaccount:acme:locker",
                     "resourceAttributes": {"group": "terrace.dev", "resource": "workspaces",
                                            "verb": "lock", "namespace": ns}},
        }))
    };
    let lsar = Api::<LocalSubjectAccessReview>::namespaced(s.admin.clone(), "acme")
        .create(&PostParams::default(), &local("acme")?)
        .await?;
    assert!(lsar.status.is_some_and(|st| st.allowed));
    let lsar = Api::<LocalSubjectAccessReview>::namespaced(s.admin.clone(), "other")
        .create(&PostParams::default(), &local("other")?)
        .await?;
    assert!(lsar.status.is_some_and(|st| !st.allowed));

    let token = token_for(&s.admin, "acme", "locker").await?;
    let locker = s.client_with_token(&token).await?;
    let ssar = |ns: &str| SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(lock_attributes(ns)),
            ..Default::default()
        },
        ..Default::default()
    };
    let mine = Api::<SelfSubjectAccessReview>::all(locker.clone());
    let yes = mine.create(&PostParams::default(), &ssar("acme")).await?;
    assert!(yes.status.is_some_and(|st| st.allowed));
    let no = mine.create(&PostParams::default(), &ssar("other")).await?;
    assert!(no.status.is_some_and(|st| !st.allowed));
    // Not a SubjectAccessReview creator: that needs a grant of its own.
    let (code, _) = api_code(
        Api::<SubjectAccessReview>::all(locker)
            .create(&PostParams::default(), &sar("acme"))
            .await,
    );
    assert_eq!(code, 403);
    s.stop().await;
    Ok(())
}

/// Raw requests through the in-process router.
async fn call(
    sim: &Simulator,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Value,
) -> anyhow::Result<(u16, Value, String)> {
    let mut b = http::Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", "application/json");
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let body = if body.is_null() {
        String::new()
    } else {
        body.to_string()
    };
    let resp = sim
        .router()
        .oneshot(b.body(axum::body::Body::from(body))?)
        .await?;
    let code = resp.status().as_u16();
    let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX).await?;
    let text = String::from_utf8_lossy(&bytes).into_owned();
    Ok((
        code,
        serde_json::from_str(&text).unwrap_or(Value::Null),
        text,
    ))
}

/// Copies kube-apiserver's impersonation filter: `system:masters` may impersonate anyone
/// (`kubectl --as`), and the request is then authorized as that user; a caller without
/// the `impersonate` verb gets 403; groups without a user are a plain-text 500.
#[tokio::test]
async fn impersonation_headers() -> R {
    let sim = Simulator::open(SimConfig::default()).await?;
    let admin = sim.client();
    locker_setup(&admin).await?;
    let bearer = format!("Bearer {}", sim.admin_token());
    let as_locker = [
        ("authorization", bearer.as_str()),
        ("impersonate-user", "system:serviceaccount:acme:locker"),
    ];
    let (code, _, _) = call(
        &sim,
        "GET",
        "/apis/terrace.dev/v1/namespaces/acme/workspaces/ws-1",
        &as_locker,
        Value::Null,
    )
    .await?;
    assert_eq!(code, 404, "allowed (get), then not found: no such resource");
    let (code, v, _) = call(
        &sim,
        "GET",
        "/api/v1/namespaces/acme/secrets",
        &as_locker,
        Value::Null,
    )
    .await?;
    assert_eq!(code, 403);
    assert_eq!(
        v["message"],
        "secrets is forbidden: User \"system:serviceaccount:acme:locker\" cannot list resource \
         \"secrets\" in API group \"\" in the namespace \"acme\""
    );
    let ssar = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": {"group": "terrace.dev", "resource": "workspaces", "verb": "lock", "namespace": "acme"}}});
    let (code, v, _) = call(
        &sim,
        "POST",
        "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
        &as_locker,
        ssar,
    )
    .await?;
    assert_eq!((code, v["status"]["allowed"].as_bool()), (201, Some(true)));

    // The locker itself may not impersonate.
    let token = token_for(&admin, "acme", "locker").await?;
    let locker_bearer = format!("Bearer {token}");
    let (code, v, _) = call(
        &sim,
        "GET",
        "/api/v1/namespaces/acme/configmaps",
        &[
            ("authorization", locker_bearer.as_str()),
            ("impersonate-user", "admin"),
        ],
        Value::Null,
    )
    .await?;
    assert_eq!(code, 403);
    assert_eq!(
        v["message"],
        "users \"admin\" is forbidden: User \"system:serviceaccount:acme:locker\" cannot \
         impersonate resource \"users\" in API group \"\" at the cluster scope"
    );
    let (code, _, text) = call(
        &sim,
        "GET",
        "/api/v1/namespaces",
        &[
            ("authorization", bearer.as_str()),
            ("impersonate-group", "devs"),
        ],
        Value::Null,
    )
    .await?;
    assert_eq!(code, 500);
    assert_eq!(
        text,
        "Internal Server Error: \"/api/v1/namespaces\": requested [{Group  devs    }] without \
         impersonating a user"
    );
    Ok(())
}

/// Copies kube-apiserver's discovery of the review APIs: `authentication.k8s.io/v1` and
/// `authorization.k8s.io/v1` list their create-only kinds, core `v1` lists
/// `serviceaccounts/token` (kind TokenRequest of authentication.k8s.io/v1); a GET on a
/// review endpoint is 405.
#[tokio::test]
async fn review_discovery() -> R {
    let sim = Simulator::open(SimConfig::default()).await?;
    let bearer = format!("Bearer {}", sim.admin_token());
    let auth = [("authorization", bearer.as_str())];
    let (code, groups, _) = call(&sim, "GET", "/apis", &auth, Value::Null).await?;
    assert_eq!(code, 200);
    let names: Vec<&str> = groups["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|g| g["name"].as_str())
        .collect();
    assert!(names.contains(&"authentication.k8s.io"), "{names:?}");
    assert!(names.contains(&"authorization.k8s.io"), "{names:?}");
    let (code, group, _) = call(
        &sim,
        "GET",
        "/apis/authorization.k8s.io",
        &auth,
        Value::Null,
    )
    .await?;
    assert_eq!(
        (code, group["preferredVersion"]["groupVersion"].as_str()),
        (200, Some("authorization.k8s.io/v1"))
    );
    let (_, list, _) = call(
        &sim,
        "GET",
        "/apis/authorization.k8s.io/v1",
        &auth,
        Value::Null,
    )
    .await?;
    let resources = list["resources"].as_array().cloned().unwrap_or_default();
    let ssar = resources
        .iter()
        .find(|r| r["name"] == "selfsubjectaccessreviews")
        .cloned()
        .unwrap_or_default();
    assert_eq!(ssar["kind"], "SelfSubjectAccessReview");
    assert_eq!(ssar["verbs"], json!(["create"]));
    assert!(
        resources
            .iter()
            .any(|r| r["name"] == "localsubjectaccessreviews" && r["namespaced"] == true)
    );
    let (_, list, _) = call(
        &sim,
        "GET",
        "/apis/authentication.k8s.io/v1",
        &auth,
        Value::Null,
    )
    .await?;
    assert!(
        list["resources"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|r| r["name"] == "tokenreviews")
    );
    let (_, core, _) = call(&sim, "GET", "/api/v1", &auth, Value::Null).await?;
    let token = core["resources"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|r| r["name"] == "serviceaccounts/token")
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        (
            &token["kind"],
            &token["group"],
            &token["version"],
            &token["verbs"]
        ),
        (
            &json!("TokenRequest"),
            &json!("authentication.k8s.io"),
            &json!("v1"),
            &json!(["create"])
        )
    );
    let (code, _, _) = call(
        &sim,
        "GET",
        "/apis/authentication.k8s.io/v1/tokenreviews",
        &auth,
        Value::Null,
    )
    .await?;
    assert_eq!(code, 405);
    Ok(())
}

/// Copies kube-controller-manager's clusterrole-aggregation controller: a ClusterRole
/// with an `aggregationRule` gets the rules of every ClusterRole its selectors match
/// written into its own `rules` (visible to `kubectl get -o yaml`), and grants them.
#[tokio::test]
async fn aggregated_cluster_role_rules_are_written_back() -> R {
    let sim = Simulator::open(SimConfig::default()).await?;
    let admin = sim.client();
    let roles = Api::<ClusterRole>::all(admin.clone());
    create(
        &roles,
        json!({"metadata": {"name": "terrace-view"},
               "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"terrace.dev/aggregate-to-view": "true"}}]},
               "rules": []}),
    )
    .await?;
    create(
        &roles,
        json!({"metadata": {"name": "workspace-view", "labels": {"terrace.dev/aggregate-to-view": "true"}},
               "rules": [{"apiGroups": ["terrace.dev"], "resources": ["workspaces"], "verbs": ["get", "list"]}]}),
    )
    .await?;
    let view = roles.get("terrace-view").await?;
    let rules = serde_json::to_value(view.rules.unwrap_or_default())?;
    assert_eq!(
        rules,
        json!([{"apiGroups": ["terrace.dev"], "resources": ["workspaces"], "verbs": ["get", "list"]}])
    );
    let managers: Vec<String> = view
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .filter_map(|m| m.manager)
        .collect();
    assert!(
        managers.contains(&"clusterrole-aggregation-controller".to_string()),
        "{managers:?}"
    );

    create(
        &Api::<ClusterRoleBinding>::all(admin.clone()),
        json!({"metadata": {"name": "viewers"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "terrace-view"},
               "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "vera"}]}),
    )
    .await?;
    let sar: SubjectAccessReview = object(json!({"spec": {"user": "vera",
        "resourceAttributes": {"group": "terrace.dev", "resource": "workspaces", "verb": "list", "namespace": "x"}}}))?;
    let status = Api::<SubjectAccessReview>::all(admin.clone())
        .create(&PostParams::default(), &sar)
        .await?
        .status
        .unwrap_or_default();
    assert!(status.allowed, "{status:?}");

    // A rule removed from the source disappears from the aggregate.
    roles
        .delete("workspace-view", &DeleteParams::default())
        .await?;
    let view = roles.get("terrace-view").await?;
    assert_eq!(view.rules.unwrap_or_default(), []);
    Ok(())
}

/// Copies kube-apiserver's bootstrap RBAC policy: `cluster-admin` bound to
/// `system:masters`, `system:basic-user` (self reviews) and `system:discovery` bound to
/// `system:authenticated`, `system:public-info-viewer` for everyone — created once and
/// left as they are on restart; anonymous requests get only health and version.
#[tokio::test]
async fn bootstrap_policy_is_created_once() -> R {
    let dir = tempfile::tempdir()?;
    let config = SimConfig {
        data_dir: Some(dir.path().to_path_buf()),
        ..SimConfig::default()
    };
    let sim = Simulator::open(config.clone()).await?;
    let roles = Api::<ClusterRole>::all(sim.client());
    let admin_role = roles.get("cluster-admin").await?;
    let rv = admin_role.metadata.resource_version.clone();
    let binding = Api::<ClusterRoleBinding>::all(sim.client())
        .get("system:basic-user")
        .await?;
    assert_eq!(
        serde_json::to_value(&binding.subjects)?,
        json!([{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:authenticated"}])
    );
    let (code, _, _) = call(&sim, "GET", "/version", &[], Value::Null).await?;
    assert_eq!(code, 200);
    let (code, _, _) = call(&sim, "GET", "/apis", &[], Value::Null).await?;
    assert_eq!(code, 403);
    sim.shutdown().await;

    let sim = Simulator::open(config).await?;
    let again = Api::<ClusterRole>::all(sim.client())
        .get("cluster-admin")
        .await?;
    assert_eq!(again.metadata.resource_version, rv);
    sim.shutdown().await;
    Ok(())
}

/// Copies kube-apiserver's persistent service-account signing key: a token issued before
/// a restart with the same data directory still authenticates after it.
#[tokio::test]
async fn tokens_survive_a_restart() -> R {
    let dir = tempfile::tempdir()?;
    let config = SimConfig {
        data_dir: Some(dir.path().to_path_buf()),
        ..SimConfig::default()
    };
    let sim = Simulator::open(config.clone()).await?;
    let admin = sim.client();
    namespace(&admin, "acme").await?;
    service_account(&admin, "acme", "bot").await?;
    let token = token_for(&admin, "acme", "bot").await?;
    sim.shutdown().await;
    assert!(dir.path().join("sa-signing-key").exists());

    let sim = Simulator::open(config).await?;
    let review: TokenReview = object(json!({"spec": {"token": token}}))?;
    let status = Api::<TokenReview>::all(sim.client())
        .create(&PostParams::default(), &review)
        .await?
        .status
        .unwrap_or_default();
    assert_eq!(status.authenticated, Some(true), "{status:?}");
    sim.shutdown().await;
    Ok(())
}

fn kubectl(kubeconfig: &std::path::Path, args: &[&str]) -> (i32, String, String) {
    match Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output()
    {
        Ok(out) => (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ),
        Err(e) => (-1, String::new(), e.to_string()),
    }
}

const WORKSPACE_CRD: &str = r#"{"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
 "metadata": {"name": "workspaces.terrace.dev"},
 "spec": {"group": "terrace.dev", "scope": "Namespaced",
  "names": {"plural": "workspaces", "singular": "workspace", "kind": "Workspace", "listKind": "WorkspaceList"},
  "versions": [{"name": "v1alpha1", "served": true, "storage": true,
   "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}}"#;

/// Copies what kubectl needs from kube-apiserver for `kubectl create token` (TokenRequest
/// on `serviceaccounts/token`), `kubectl auth can-i VERB RESOURCE --as USER` (impersonated
/// SelfSubjectAccessReview: exit 0 and `yes`, exit 1 and `no`), `kubectl auth can-i --list`
/// (SelfSubjectRulesReview) and `kubectl auth whoami` (SelfSubjectReview).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_create_token_and_auth_can_i() -> R {
    if Command::new("kubectl")
        .args(["version", "--client"])
        .output()
        .is_err()
    {
        eprintln!("kubectl not installed; skipping");
        return Ok(());
    }
    let s = Served::start(SimConfig::default()).await?;
    locker_setup(&s.admin).await?;
    let crd: Value = serde_json::from_str(WORKSPACE_CRD)?;
    create(
        &Api::<
            k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
        >::all(s.admin.clone()),
        crd,
    )
    .await?;
    let dir = tempfile::tempdir()?;
    let kc = dir.path().join("kubeconfig");
    std::fs::write(&kc, s.sim.kubeconfig(&s.url, &s.sim.admin_token()))?;
    let cache = dir.path().join("cache");
    let cache_flag = format!("--cache-dir={}", cache.display());

    let kc2 = kc.clone();
    let (yes, no, list, token, whoami) = tokio::task::spawn_blocking(move || {
        let run = |args: &[&str]| {
            let mut all = vec![cache_flag.as_str()];
            all.extend_from_slice(args);
            kubectl(&kc2, &all)
        };
        let as_locker = "--as=system:serviceaccount:acme:locker";
        (
            run(&[
                "auth",
                "can-i",
                "lock",
                "workspaces.terrace.dev",
                "-n",
                "acme",
                as_locker,
            ]),
            run(&[
                "auth",
                "can-i",
                "lock",
                "workspaces.terrace.dev",
                "-n",
                "other",
                as_locker,
            ]),
            run(&["auth", "can-i", "--list", "-n", "acme", as_locker]),
            run(&["create", "token", "locker", "-n", "acme"]),
            run(&["auth", "whoami", "-o", "json", as_locker]),
        )
    })
    .await?;
    assert_eq!((yes.0, yes.1.trim()), (0, "yes"), "{yes:?}");
    assert_eq!((no.0, no.1.trim()), (1, "no"), "{no:?}");
    assert_eq!(list.0, 0, "{list:?}");
    assert!(
        list.1
            .lines()
            .any(|l| l.starts_with("workspaces.terrace.dev") && l.contains("[get lock]")),
        "{}",
        list.1
    );
    assert_eq!(token.0, 0, "{token:?}");
    let review: TokenReview = object(json!({"spec": {"token": token.1.trim()}}))?;
    let status = Api::<TokenReview>::all(s.admin.clone())
        .create(&PostParams::default(), &review)
        .await?
        .status
        .unwrap_or_default();
    assert_eq!(
        status.user.and_then(|u| u.username).as_deref(),
        Some("system:serviceaccount:acme:locker")
    );
    assert_eq!(whoami.0, 0, "{whoami:?}");
    let who: Value = serde_json::from_str(&whoami.1)?;
    assert_eq!(
        who["status"]["userInfo"]["username"],
        "system:serviceaccount:acme:locker"
    );
    s.stop().await;
    Ok(())
}
