//! Sending one notification: an HTTP POST of a JSON body, with a timeout, no redirects
//! followed, and only to destinations the operator may reach. The host is resolved here
//! and every address is checked ([`address_refusal`]); the connection then goes through a
//! resolver that keeps only allowed addresses, so a name that resolves differently the
//! second time (DNS rebinding) still cannot reach a refused address.

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use ipnet::IpNet;
use terrace_crds::DeliveryResponse;
use terrace_crds::common::prefix_within;
use terrace_crds::constants::{
    NOTIFICATION_BODY_KEPT, NOTIFICATION_SIGNATURE_HEADER, NOTIFICATION_TIMEOUT_SECS,
};
use terrace_crds::notification::{address_refusal, check_url};
use ureq::config::Config;
use ureq::unversioned::resolver::{DefaultResolver, ResolvedSocketAddrs, Resolver};
use ureq::unversioned::transport::{DefaultConnector, NextTimeout};

/// How a delivery went (the metric's outcome label).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Delivered,
    Failed,
    Refused,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Delivered => "delivered",
            Outcome::Failed => "failed",
            Outcome::Refused => "refused",
        }
    }
}

/// Sends notifications (cheap to clone: one connection pool).
#[derive(Clone, Debug)]
pub struct Sender {
    agent: ureq::Agent,
    allowed: Arc<Vec<IpNet>>,
}

/// The operator's resolver: the default one, keeping only allowed addresses.
#[derive(Debug)]
struct AllowedOnly {
    inner: DefaultResolver,
    allowed: Arc<Vec<IpNet>>,
}

impl Resolver for AllowedOnly {
    fn resolve(
        &self,
        uri: &ureq::http::Uri,
        config: &Config,
        timeout: NextTimeout,
    ) -> Result<ResolvedSocketAddrs, ureq::Error> {
        let all = self.inner.resolve(uri, config, timeout)?;
        let mut kept = self.inner.empty();
        for a in all.iter() {
            if address_refusal(a.ip(), &self.allowed).is_none() {
                kept.push(*a);
            }
        }
        if kept.is_empty() {
            return Err(ureq::Error::HostNotFound);
        }
        Ok(kept)
    }
}

impl Sender {
    /// A sender that may reach public addresses and those in `allowed`.
    pub fn new(allowed: Vec<IpNet>) -> Sender {
        let allowed = Arc::new(allowed);
        let config = ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_secs(NOTIFICATION_TIMEOUT_SECS)))
            .max_redirects(0)
            // No proxy from the environment: a proxy would connect to whatever address
            // it resolves, around the address check above (issue 39 §10).
            .proxy(None)
            .http_status_as_error(false)
            .user_agent(concat!("terrace-notifications/", env!("CARGO_PKG_VERSION")))
            .build();
        let agent = ureq::Agent::with_parts(
            config,
            DefaultConnector::default(),
            AllowedOnly {
                inner: DefaultResolver::default(),
                allowed: allowed.clone(),
            },
        );
        Sender { agent, allowed }
    }

    /// Why `url` may not be sent to (None: it may): not an http(s) URL, or a host with a
    /// refused (or no) address.
    fn refusal(&self, url: &str) -> Option<String> {
        let dest = match check_url(url) {
            Ok(d) => d,
            Err(why) => return Some(format!("the URL {why}")),
        };
        let addrs: Vec<SocketAddr> = match (dest.host.as_str(), dest.port).to_socket_addrs() {
            Ok(a) => a.collect(),
            Err(e) => return Some(format!("{} does not resolve: {e}", dest.host)),
        };
        if addrs.is_empty() {
            return Some(format!("{} has no address", dest.host));
        }
        addrs
            .iter()
            .find_map(|a| address_refusal(a.ip(), &self.allowed))
    }

    /// POSTs `body` (JSON) to `url`, signed with `signature` when given; blocking (call it
    /// from a blocking thread). Answers the delivery response (without the notification
    /// and attempt, which the caller fills in) and the outcome.
    pub fn send(
        &self,
        url: &str,
        body: &[u8],
        signature: Option<&str>,
    ) -> (DeliveryResponse, Outcome) {
        let sent_at = terrace_crds::common::timestamp(&k8s_openapi::jiff::Timestamp::now());
        let mut resp = DeliveryResponse {
            url: url.to_owned(),
            sent_at,
            ..Default::default()
        };
        if let Some(why) = self.refusal(url) {
            resp.body = format!("not sent: {why}");
            return (resp, Outcome::Refused);
        }
        let mut req = self
            .agent
            .post(url)
            .header("Content-Type", "application/json");
        if let Some(sig) = signature {
            req = req.header(NOTIFICATION_SIGNATURE_HEADER, sig);
        }
        match req.send(body) {
            Ok(mut answer) => {
                let code = answer.status();
                resp.code = code.as_u16().to_string();
                for (name, value) in answer.headers() {
                    if let Ok(v) = value.to_str() {
                        resp.headers
                            .entry(name.as_str().to_owned())
                            .or_default()
                            .push(v.to_owned());
                    }
                }
                let text = answer
                    .body_mut()
                    .with_config()
                    .limit(NOTIFICATION_BODY_KEPT as u64 * 4)
                    .read_to_string()
                    .unwrap_or_default();
                resp.body = prefix_within(&text, NOTIFICATION_BODY_KEPT).to_owned();
                resp.successful = code.is_success();
                let outcome = if resp.successful {
                    Outcome::Delivered
                } else {
                    Outcome::Failed
                };
                (resp, outcome)
            }
            Err(ureq::Error::HostNotFound) => {
                resp.body =
                    "not sent: the destination has no address the operator may reach".to_owned();
                (resp, Outcome::Refused)
            }
            Err(e) => {
                resp.body = format!("no answer: {e}");
                (resp, Outcome::Failed)
            }
        }
    }
}
