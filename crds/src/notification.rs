//! Notifications, the pure part (docs/notifications.md): which notifications a run has
//! reached ([`notices`]), which of them a configuration still owes ([`due`]), the payload
//! each destination type takes ([`payload`]), the signature of a generic one
//! ([`signature`]), the retry schedule ([`retry_delay`]) and which destinations the
//! operator may reach ([`check_url`], [`address_refusal`]). The operator sends them.

use std::net::IpAddr;

use hmac::{Hmac, Mac};
use ipnet::IpNet;
use jiff::Timestamp;
use serde_json::{Value, json};
use sha2::Sha512;

use crate::constants::{
    NOTIFICATION_FIRST_RETRY_SECS, NOTIFICATION_MAX_ATTEMPTS, NOTIFICATION_WINDOW_SECS,
};
use crate::resources::{DeliveredNotification, Run};
use crate::run::{QUEUEABLE_AT, RunState, timestamp_key};

/// Every trigger name TFE accepts (go-tfe's list); the `run:*` ones fire here.
pub const TRIGGERS: [&str; 12] = [
    "run:created",
    "run:planning",
    "run:needs_attention",
    "run:applying",
    "run:completed",
    "run:errored",
    "assessment:drifted",
    "assessment:failed",
    "assessment:check_failure",
    "workspace:auto_destroy_reminder",
    "workspace:auto_destroy_run_results",
    "change_request:created",
];

/// The destination types delivered (TFE's `email` needs a mail server terrace has not).
pub const DESTINATION_TYPES: [&str; 3] = ["generic", "slack", "microsoft-teams"];

/// A notification a run reached: a trigger, the state that fired it and when.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Notice {
    pub trigger: &'static str,
    pub state: RunState,
    /// When (RFC 3339).
    pub at: String,
    /// Who caused it (`user:NAME`), when a person did.
    pub by: Option<String>,
}

impl Notice {
    /// TFE's words for it (the payload's `message`).
    pub fn message(&self) -> &'static str {
        if self.is_assessment() {
            return crate::assessment::trigger_message(self.trigger);
        }
        match self.state {
            RunState::Pending => "Run Created",
            RunState::Planning => "Run Planning",
            RunState::Planned
            | RunState::PostPlanCompleted
            | RunState::PostPlanAwaitingDecision => "Run Needs Attention",
            RunState::Applying => "Run Applying",
            RunState::Applied => "Run Applied",
            RunState::PlannedAndFinished => "Run Planned and Finished",
            RunState::PlannedAndSaved => "Run Planned and Saved",
            RunState::Discarded => "Run Discarded",
            RunState::Canceled | RunState::ForceCanceled => "Run Canceled",
            _ => "Run Errored",
        }
    }

    /// A health assessment's notification (`assessment:*`).
    pub fn is_assessment(&self) -> bool {
        self.trigger.starts_with("assessment:")
    }

    /// The key of the notification in its run (what a configuration records delivered).
    pub fn key(&self, run_id: &str) -> String {
        format!("{run_id}/{}", self.trigger)
    }
}

/// The trigger reaching `state` fires, if any: TFE's six run triggers. A plan that waits
/// for a person needs attention; a run that stops short of its end (an error, a cancel, a
/// discard) errored; one that ends as planned completed.
fn trigger_of(state: RunState) -> Option<&'static str> {
    Some(match state {
        RunState::Pending => "run:created",
        RunState::Planning => "run:planning",
        RunState::Planned | RunState::PostPlanCompleted | RunState::PostPlanAwaitingDecision => {
            "run:needs_attention"
        }
        RunState::Applying => "run:applying",
        RunState::Applied | RunState::PlannedAndFinished | RunState::PlannedAndSaved => {
            "run:completed"
        }
        RunState::Errored | RunState::Canceled | RunState::ForceCanceled | RunState::Discarded => {
            "run:errored"
        }
        _ => return None,
    })
}

/// The notifications run `r` has reached, oldest first (each trigger once). A plan the
/// run applies by itself (auto-apply) needs no attention.
pub fn notices(r: &Run) -> Vec<Notice> {
    let Some(st) = r.status.as_ref() else {
        return Vec::new();
    };
    // A health assessment reaches no run trigger, only the `assessment:*` ones its
    // result fires when it ends ([`crate::assessment::triggers`]).
    if r.spec.assessment {
        let Some(a) = st.assessment.as_ref() else {
            return Vec::new();
        };
        let state = RunState::of(st.status.as_deref()).unwrap_or(RunState::Errored);
        let Some(at) = st.status_timestamps.get(&timestamp_key(state)).cloned() else {
            return Vec::new();
        };
        return a
            .triggers
            .iter()
            .filter_map(|t| TRIGGERS.iter().find(|k| *k == t).copied())
            .filter(|t| t.starts_with("assessment:"))
            .map(|trigger| Notice {
                trigger,
                state,
                at: at.clone(),
                by: None,
            })
            .collect();
    }
    let auto = r.spec.auto_apply || st.confirmed_by.as_deref() == Some("auto-apply");
    let by_action = |a: &str| st.acted_by.get(a).cloned();
    let mut out: Vec<Notice> = Vec::new();
    for state in RunState::ALL {
        let at = if state == RunState::Pending {
            st.status_timestamps.get(QUEUEABLE_AT).cloned().or_else(|| {
                r.metadata
                    .creation_timestamp
                    .as_ref()
                    .map(|t| crate::common::timestamp(&t.0))
            })
        } else {
            st.status_timestamps.get(&timestamp_key(state)).cloned()
        };
        let (Some(at), Some(trigger)) = (at, trigger_of(state)) else {
            continue;
        };
        if (matches!(state, RunState::Planned | RunState::PostPlanCompleted) && auto)
            || out.iter().any(|n| n.trigger == trigger)
        {
            continue;
        }
        let by = match state {
            RunState::Pending => r.spec.created_by.clone(),
            RunState::Applying => st.confirmed_by.clone().filter(|c| c.starts_with("user:")),
            RunState::Discarded => by_action("discard"),
            RunState::Canceled => by_action("cancel"),
            RunState::ForceCanceled => by_action("force-cancel"),
            _ => None,
        };
        out.push(Notice {
            trigger,
            state,
            at,
            by,
        });
    }
    out.sort_by(|a, b| a.at.cmp(&b.at));
    out
}

/// The earliest time a configuration created at `created` still notifies at `now`: its
/// creation (runs before it are not its business), and no earlier than the delivery
/// window.
pub fn notify_since(created: Timestamp, now: Timestamp) -> Timestamp {
    let window = now
        .checked_sub(jiff::SignedDuration::from_secs(NOTIFICATION_WINDOW_SECS))
        .unwrap_or(now);
    created.max(window)
}

/// Whether `at` (RFC 3339) is at or after `since`; an unreadable time is not.
pub fn at_or_after(at: &str, since: Timestamp) -> bool {
    at.parse::<Timestamp>().is_ok_and(|t| t >= since)
}

/// The notifications of run `run_id` a configuration listening to `triggers` still owes:
/// those of `notices` it listens to, reached since `since`, not in `delivered`.
pub fn due(
    run_id: &str,
    notices: Vec<Notice>,
    triggers: &[String],
    since: Timestamp,
    delivered: &[DeliveredNotification],
) -> Vec<Notice> {
    notices
        .into_iter()
        .filter(|n| triggers.iter().any(|t| t == n.trigger))
        .filter(|n| at_or_after(&n.at, since))
        .filter(|n| {
            !delivered
                .iter()
                .any(|d| d.run == run_id && d.trigger == n.trigger)
        })
        .collect()
}

/// The delivered entries still inside the window at `since` (older ones are forgotten:
/// their notifications are no longer sent).
pub fn prune_delivered(delivered: &mut Vec<DeliveredNotification>, since: Timestamp) {
    delivered.retain(|d| at_or_after(&d.at, since));
}

/// How long to wait before attempt `attempt + 1` after attempt `attempt` failed; None
/// when `attempt` was the last.
pub fn retry_delay(attempt: u32) -> Option<std::time::Duration> {
    (attempt < NOTIFICATION_MAX_ATTEMPTS).then(|| {
        let secs = NOTIFICATION_FIRST_RETRY_SECS.saturating_mul(3u64.saturating_pow(attempt - 1));
        std::time::Duration::from_secs(secs)
    })
}

/// What a notification is about: the configuration and its workspace.
#[derive(Clone, Debug)]
pub struct Subject<'a> {
    pub configuration_id: &'a str,
    pub configuration_name: &'a str,
    pub workspace_id: &'a str,
    pub workspace_name: &'a str,
    pub organization: &'a str,
}

/// The run a notification is about.
#[derive(Clone, Debug)]
pub struct RunFacts<'a> {
    pub id: &'a str,
    pub message: &'a str,
    pub created_at: &'a str,
    pub created_by: Option<&'a str>,
    /// The run's page (`https://HOST/app/ORG/WORKSPACE/runs/RUN`).
    pub url: String,
    /// A health assessment's result (None for a run).
    pub assessment: Option<AssessmentFacts<'a>>,
}

/// What an assessment notification says.
#[derive(Clone, Debug)]
pub struct AssessmentFacts<'a> {
    pub result: &'a crate::resources::RunAssessment,
    /// The result's ID (`asmtres-…`).
    pub result_id: String,
    /// When it ended (RFC 3339).
    pub at: &'a str,
    /// The API's base URL (`https://HOST`), for the results' `url`.
    pub base: String,
}

/// TFE's document of an assessment result in a notification's `details`.
fn result_payload(
    id: &str,
    base: &str,
    at: Option<&str>,
    s: &crate::assessment::AssessmentSummary,
) -> Value {
    json!({
        "id": id,
        "url": format!("{base}/api/v2/assessment-results/{id}"),
        "succeeded": s.succeeded,
        "drifted": s.drifted,
        "all_checks_succeeded": s.all_checks_succeeded(),
        "resources_drifted": s.resources_drifted,
        "resources_undrifted": s.resources_undrifted,
        "checks_passed": s.checks_passed,
        "checks_failed": s.checks_failed,
        "checks_errored": s.checks_errored,
        "checks_unknown": s.checks_unknown,
        "created_at": at,
    })
}

/// The generic payload of an assessment notification: TFE's `payload_version` 2 with
/// `trigger_scope` `assessment` and the new and prior results in `details`.
pub fn assessment_payload(s: &Subject<'_>, a: &AssessmentFacts<'_>, n: &Notice) -> Value {
    let prior = match (&a.result.prior_result_id, &a.result.prior) {
        (Some(id), Some(p)) => result_payload(id, &a.base, None, p),
        _ => Value::Null,
    };
    json!({
        "payload_version": "2",
        "notification_configuration_id": s.configuration_id,
        "notification_configuration_url": format!(
            "{}/api/v2/notification-configurations/{}", a.base, s.configuration_id
        ),
        "trigger_scope": "assessment",
        "trigger": n.trigger,
        "message": n.message(),
        "details": {
            "new_assessment_result":
                result_payload(&a.result_id, &a.base, Some(a.at), &a.result.summary),
            "prior_assessment_result": prior,
            "workspace_id": s.workspace_id,
            "workspace_name": s.workspace_name,
            "organization_name": s.organization,
        },
    })
}

/// The name in `user:NAME` (other actors as they are).
fn person(actor: &str) -> &str {
    actor.strip_prefix("user:").unwrap_or(actor)
}

/// TFE's generic payload (`payload_version` 1): one notification, about `run` and
/// `notice`, or a verification when `run` is None.
pub fn generic_payload(s: &Subject<'_>, run: Option<(&RunFacts<'_>, &Notice)>) -> Value {
    if let Some((r, n)) = run
        && n.is_assessment()
        && let Some(a) = &r.assessment
    {
        return assessment_payload(s, a, n);
    }
    let notification = match run {
        Some((_, n)) => json!({
            "message": n.message(),
            "trigger": n.trigger,
            "run_status": n.state.as_str(),
            "run_updated_at": n.at,
            "run_updated_by": n.by.as_deref().map(person),
        }),
        None => json!({
            "message": format!("Verification of {}", s.configuration_name),
            "trigger": "verification",
            "run_status": null,
            "run_updated_at": null,
            "run_updated_by": null,
        }),
    };
    let r = run.map(|(r, _)| r);
    json!({
        "payload_version": 1,
        "notification_configuration_id": s.configuration_id,
        "run_url": r.map(|r| r.url.as_str()),
        "run_id": r.map(|r| r.id),
        "run_message": r.map(|r| r.message),
        "run_created_at": r.map(|r| r.created_at),
        "run_created_by": r.and_then(|r| r.created_by).map(person),
        "workspace_id": s.workspace_id,
        "workspace_name": s.workspace_name,
        "organization_name": s.organization,
        "notifications": [notification],
    })
}

/// The title, details and colour of a chat message (Slack, Teams).
fn chat_parts(
    s: &Subject<'_>,
    run: Option<(&RunFacts<'_>, &Notice)>,
) -> (String, String, &'static str) {
    let place = format!("{}/{}", s.organization, s.workspace_name);
    match run {
        Some((r, n)) if n.is_assessment() && r.assessment.is_some() => {
            let found = r.assessment.as_ref().map(|a| &a.result.summary);
            let found = found.cloned().unwrap_or_default();
            let details = match n.trigger {
                "assessment:drifted" => format!(
                    "{place} · {} resources drifted: {}",
                    found.resources_drifted,
                    found.drifted_resources.join(", ")
                ),
                "assessment:check_failure" => format!(
                    "{place} · {} checks failed: {}",
                    found.checks_failed + found.checks_errored,
                    found.failed_checks.join("; ")
                ),
                _ => format!(
                    "{place} · {}",
                    found
                        .error_message
                        .as_deref()
                        .unwrap_or("the assessment failed")
                ),
            };
            (n.message().to_owned(), details, "#e01e5a")
        }
        Some((r, n)) => {
            let colour = match n.trigger {
                "run:completed" => "#2eb67d",
                "run:errored" => "#e01e5a",
                "run:needs_attention" => "#ecb22e",
                _ => "#5c4ee5",
            };
            let mut details = format!("{place} · {}", r.id);
            if !r.message.is_empty() {
                details.push_str(&format!(" · {}", r.message));
            }
            (n.message().to_owned(), details, colour)
        }
        None => (
            format!("Verification of {}", s.configuration_name),
            format!("{place}: notifications from terrace reach this channel."),
            "#5c4ee5",
        ),
    }
}

/// A Slack incoming webhook's message.
pub fn slack_payload(s: &Subject<'_>, run: Option<(&RunFacts<'_>, &Notice)>) -> Value {
    let (title, details, colour) = chat_parts(s, run);
    let link = run.map(|(r, _)| r.url.clone());
    json!({
        "text": format!("{title}: {details}"),
        "attachments": [{
            "fallback": format!("{title}: {details}"),
            "color": colour,
            "title": title,
            "title_link": link,
            "text": details,
        }],
    })
}

/// A Microsoft Teams incoming webhook's message card.
pub fn teams_payload(s: &Subject<'_>, run: Option<(&RunFacts<'_>, &Notice)>) -> Value {
    let (title, details, colour) = chat_parts(s, run);
    let mut card = json!({
        "@type": "MessageCard",
        "@context": "https://schema.org/extensions",
        "summary": title,
        "themeColor": colour.trim_start_matches('#'),
        "title": title,
        "text": details,
    });
    if let Some((r, _)) = run {
        card["potentialAction"] = json!([{
            "@type": "OpenUri",
            "name": if run.is_some_and(|(_, n)| n.is_assessment()) { "View health" } else { "View run" },
            "targets": [{"os": "default", "uri": r.url}],
        }]);
    }
    card
}

/// The payload of destination type `destination`.
pub fn payload(destination: &str, s: &Subject<'_>, run: Option<(&RunFacts<'_>, &Notice)>) -> Value {
    match destination {
        "slack" => slack_payload(s, run),
        "microsoft-teams" => teams_payload(s, run),
        _ => generic_payload(s, run),
    }
}

/// The signature of `body` with `token`: the hex HMAC-SHA512 (TFE's
/// `X-TFE-Notification-Signature`).
pub fn signature(token: &str, body: &[u8]) -> String {
    let mut mac =
        Hmac::<Sha512>::new_from_slice(token.as_bytes()).expect("HMAC takes keys of any length");
    mac.update(body);
    crate::common::hex(&mac.finalize().into_bytes())
}

/// A destination URL's parts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Destination {
    pub https: bool,
    /// The host: a name, or an address (an IPv6 one without brackets).
    pub host: String,
    pub port: u16,
}

/// The parts of destination `url`, or why it is not one: an absolute `http` or `https`
/// URL with a host and no credentials in it.
pub fn check_url(url: &str) -> Result<Destination, String> {
    let (https, rest) = if let Some(r) = url.strip_prefix("https://") {
        (true, r)
    } else if let Some(r) = url.strip_prefix("http://") {
        (false, r)
    } else {
        return Err("must be an http or https URL".to_owned());
    };
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("must not contain spaces".to_owned());
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.contains('@') {
        return Err("must not carry credentials (use the token)".to_owned());
    }
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (h, after) = v6.split_once(']').ok_or("has an unclosed [")?;
        (h, after.strip_prefix(':'))
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    if host.is_empty() {
        return Err("has no host".to_owned());
    }
    let port = match port {
        Some(p) => p
            .parse::<u16>()
            .map_err(|_| "has an invalid port".to_owned())?,
        None if https => 443,
        None => 80,
    };
    Ok(Destination {
        https,
        host: host.to_ascii_lowercase(),
        port,
    })
}

/// Why the operator may not send to `ip` (None: it may): addresses inside the cluster's
/// and the machine's reach — loopback, private, link-local (cloud metadata services),
/// shared, unspecified, multicast — are refused unless `allowed` holds them.
pub fn address_refusal(ip: IpAddr, allowed: &[IpNet]) -> Option<String> {
    let ip = match ip {
        IpAddr::V6(v6) => embedded_ipv4(v6).map_or(ip, IpAddr::V4),
        v4 => v4,
    };
    if allowed.iter().any(|n| n.contains(&ip)) {
        return None;
    }
    let kind = match ip {
        IpAddr::V4(a) => {
            let o = a.octets();
            if a.is_loopback() {
                Some("a loopback")
            } else if a.is_private() {
                Some("a private")
            } else if a.is_link_local() {
                Some("a link-local")
            } else if o[0] == 100 && (o[1] & 0xc0) == 64 {
                Some("a shared (carrier-grade NAT)")
            } else if a.is_unspecified() || o[0] == 0 {
                Some("an unspecified")
            } else if a.is_multicast() || a.is_broadcast() || o[0] >= 240 {
                Some("a multicast or reserved")
            } else {
                None
            }
        }
        IpAddr::V6(a) => {
            let first = a.segments()[0];
            if a.is_loopback() {
                Some("a loopback")
            } else if a.is_unspecified() {
                Some("an unspecified")
            } else if (first & 0xfe00) == 0xfc00 {
                Some("a private (unique local)")
            } else if (first & 0xffc0) == 0xfe80 {
                Some("a link-local")
            } else if a.is_multicast() {
                Some("a multicast")
            } else {
                None
            }
        }
    };
    kind.map(|k| {
        format!("{ip} is {k} address, which the operator does not send to (see --notification-allowed-cidrs)")
    })
}

/// The IPv4 address an IPv6 address carries, where it reaches that IPv4 host: mapped
/// (`::ffff:a.b.c.d`), compatible (`::a.b.c.d`), NAT64 (`64:ff9b::/96`), 6to4
/// (`2002:AABB:CCDD::/48`) and Teredo (the client, `2001:0::/32`).
pub fn embedded_ipv4(v6: std::net::Ipv6Addr) -> Option<std::net::Ipv4Addr> {
    use std::net::Ipv4Addr;
    let s = v6.segments();
    let low = |a: u16, b: u16| Ipv4Addr::new((a >> 8) as u8, a as u8, (b >> 8) as u8, b as u8);
    if let Some(v4) = v6.to_ipv4_mapped() {
        return Some(v4);
    }
    if s[..6] == [0; 6] && (s[6] != 0 || s[7] > 1) {
        return Some(low(s[6], s[7]));
    }
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return Some(low(s[6], s[7]));
    }
    if s[0] == 0x2002 {
        return Some(low(s[1], s[2]));
    }
    if s[0] == 0x2001 && s[1] == 0 {
        return Some(low(!s[6], !s[7]));
    }
    None
}

/// The address `host` spells, if it is one: an IPv6 address, or an IPv4 address in any
/// spelling a resolver accepts (`127.0.0.1`, `2130706433`, `0x7f000001`, `0177.1`).
pub fn literal_ip(host: &str) -> Option<IpAddr> {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Some(ip);
    }
    let parts: Vec<&str> = host.split('.').collect();
    if parts.is_empty() || parts.len() > 4 {
        return None;
    }
    let number = |p: &str| -> Option<u64> {
        if let Some(hex) = p.strip_prefix("0x").or_else(|| p.strip_prefix("0X")) {
            u64::from_str_radix(hex, 16).ok()
        } else if p.len() > 1 && p.starts_with('0') {
            u64::from_str_radix(&p[1..], 8).ok()
        } else {
            p.parse().ok()
        }
    };
    let values: Vec<u64> = parts.iter().map(|p| number(p)).collect::<Option<_>>()?;
    let (last, head) = values.split_last()?;
    if head.iter().any(|v| *v > 255) || *last >= 1u64 << (8 * (4 - head.len())) {
        return None;
    }
    let mut n: u64 = 0;
    for (i, v) in head.iter().enumerate() {
        n |= v << (8 * (3 - i));
    }
    n |= last;
    Some(IpAddr::V4(std::net::Ipv4Addr::from(n as u32)))
}

/// Host names that always reach something inside the machine or the cloud it runs in.
const INTERNAL_NAMES: &[&str] = &[
    "localhost",
    "metadata",
    "metadata.google.internal",
    "metadata.goog",
    "instance-data",
    "instance-data.ec2.internal",
];

/// Why destination `url` is refused when it is configured (None: it may be stored): not
/// an http(s) URL, an address the operator never sends to (in any spelling, IPv4 inside
/// IPv6 included) unless `allowed` holds it, or a name of the machine or its cloud's
/// metadata service. Names are resolved, and their addresses checked, again at send time.
pub fn destination_refusal(url: &str, allowed: &[IpNet]) -> Option<String> {
    let dest = match check_url(url) {
        Ok(d) => d,
        Err(why) => return Some(format!("URL {why}")),
    };
    let host = dest.host.trim_end_matches('.');
    if let Some(ip) = literal_ip(host) {
        return address_refusal(ip, allowed).map(|why| format!("URL host {why}"));
    }
    if host == "localhost" || host.ends_with(".localhost") {
        let loopback = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);
        return address_refusal(loopback, allowed).map(|why| format!("URL host {host}: {why}"));
    }
    if INTERNAL_NAMES.contains(&host) {
        return Some(format!(
            "URL host {host} is a name of this machine or its cloud's metadata service, which the operator does not send to"
        ));
    }
    None
}

/// The addresses inside the cluster's reach that notifications may go to anyway
/// (`--notification-allowed-cidrs`, read by the operator when it sends and by the API
/// server when a destination is configured).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AllowedCidrs(pub Vec<IpNet>);

/// Parses `--notification-allowed-cidrs`.
pub fn parse_allowed_cidrs(s: &str) -> Result<AllowedCidrs, String> {
    parse_cidrs(s).map(AllowedCidrs)
}

/// The CIDRs of a comma-separated list (`127.0.0.0/8,::1/128`; a bare address is one
/// host), or the entry that is not one.
pub fn parse_cidrs(list: &str) -> Result<Vec<IpNet>, String> {
    list.split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(|e| {
            e.parse::<IpNet>()
                .or_else(|_| e.parse::<IpAddr>().map(IpNet::from))
                .map_err(|_| format!("{e:?} is not a CIDR"))
        })
        .collect()
}

#[cfg(test)]
mod tests;
