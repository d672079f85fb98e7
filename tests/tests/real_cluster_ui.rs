//! The real-cluster tier (issue 29): the web view's sessions with the chart's RBAC. Two
//! API server replicas answer one person's requests: a session started on one is known
//! to the other (they share it through a Secret of the release namespace), and a
//! sign-out on one ends it on both within the replicas' freshness window.

use std::time::Duration;

use terrace_tests::real::{RealCluster, eventually};
use terrace_tests::web::{agent, page};

#[test]
fn a_session_started_on_one_replica_works_on_the_other_until_signed_out() {
    let Some(cluster) = RealCluster::from_env() else {
        return;
    };
    let (a, url_a) = cluster.api_server();
    let (b, url_b) = cluster.api_server();
    let org = RealCluster::unique("ui");
    let admin = cluster.admin(&url_a);
    admin.create_org(&org);

    // Sign in on replica A.
    let r = agent()
        .post(&format!("{url_a}/app/session"))
        .header("Content-Type", "application/x-www-form-urlencoded")
        .send(format!("token={}&next=/app", cluster.admin_token))
        .expect("sign in");
    assert_eq!(r.status().as_u16(), 303, "{}", RealCluster::logs_of(&[&a]));
    let set = r
        .headers()
        .get("set-cookie")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    assert!(
        set.contains("HttpOnly") && set.contains("SameSite=Strict"),
        "{set}"
    );
    let cookie = set
        .split(';')
        .next()
        .and_then(|kv| kv.split_once('='))
        .map(|(_, v)| v.to_owned())
        .expect("the session cookie");

    // Replica B knows the session; the token is nowhere in the shared Secret's keys.
    let (status, body) = page(&url_b, &cookie, "/app");
    assert_eq!(status, 200, "{body}\n{}", RealCluster::logs_of(&[&b]));
    assert!(body.contains(&org), "{body}");
    // Each identity's sessions are one small Secret (issue 39 §5), named by the key the
    // cookie starts with.
    let (key, secret_part) = cookie.split_once('.').expect("<key>.<secret>");
    let secret = format!("terrace-ui-sessions-{key}");
    let keys = cluster.kubectl_ok(&[
        "get",
        "secret",
        &secret,
        "-n",
        terrace_tests::real::RELEASE_NS,
        "-o",
        "jsonpath={.data}",
    ]);
    assert!(
        !keys.contains(secret_part) && !keys.contains(&cookie),
        "the cookie's value is not stored"
    );

    // Signed out on B, the session ends on A too (within the freshness window).
    let csrf = body
        .split("name=\"csrf\" value=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap_or_default()
        .to_owned();
    let r = agent()
        .post(&format!("{url_b}/app/session/delete"))
        .header("Cookie", format!("terrace_session={cookie}"))
        .header("Content-Type", "application/x-www-form-urlencoded")
        .send(format!("csrf={csrf}"))
        .expect("sign out");
    assert_eq!(r.status().as_u16(), 303);
    let ended = eventually(Duration::from_secs(30), || {
        (page(&url_a, &cookie, "/app").0 == 303).then_some(())
    });
    assert!(ended.is_some(), "replica A still honours the ended session");
    // The identity's last session ended: its Secret is gone, no token stays behind.
    let left = cluster.kubectl(&[
        "get",
        "secret",
        &secret,
        "-n",
        terrace_tests::real::RELEASE_NS,
    ]);
    assert!(!left.status.success(), "the sessions Secret stayed");
    drop((a, b));
}
