//! Policy as code (issue 30, docs/policies.md): OPA policies in Rego, evaluated
//! in-process by the `regorus` interpreter against TFE's OPA input document. This module
//! is the pure core — compiling a policy, building the input, evaluating one policy with
//! bounds, and reading its result as TFE does; the objects, the run's task stage and the
//! API build on it.
//!
//! TFE's reading of a policy's `query` (such as `data.terraform.policies.tags.deny`):
//! the policy **passes** when the query is undefined or its value is empty (an empty set
//! or array, `false`, `null`), and **fails** otherwise; the values of a set or array are
//! its messages (strings as they are; an object's `msg` or `message`, else its JSON).
//! A policy that does not compile, whose query errors, or that runs past its time limit
//! **errors**, which counts as a failure of its enforcement level.

use std::num::NonZeroU32;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::resources::{PolicyResult, PolicySetResult, RunPolicyEvaluation};

/// Longest one policy may evaluate by default; then it errors with a clear reason.
pub const DEFAULT_TIME_LIMIT: Duration = Duration::from_secs(5);
/// Largest Rego module accepted (bytes).
pub const MAX_POLICY_BYTES: usize = 256 << 10;
/// Most messages kept of one failed policy, and most bytes of each.
pub const MAX_MESSAGES: usize = 50;
pub const MAX_MESSAGE_BYTES: usize = 1024;

/// A policy's enforcement level.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Enforcement {
    /// A failure warns; the run goes on.
    #[default]
    Advisory,
    /// A failure stops the run before apply (unless overridden where allowed).
    Mandatory,
}

/// One policy as evaluated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    pub name: String,
    /// The Rego module.
    pub rego: String,
    /// The query whose value decides (`data.terraform.deny`).
    pub query: String,
    pub enforcement: Enforcement,
}

/// What a policy came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Passed,
    Failed,
    /// It could not be evaluated (compile error, runtime error, time limit).
    Errored,
}

/// A policy's outcome (TFE's policy set outcome entry).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Outcome {
    pub policy_name: String,
    pub enforcement_level: Enforcement,
    pub status: Verdict,
    /// The query's messages (a failure), or why it errored.
    pub messages: Vec<String>,
}

impl Outcome {
    /// Whether this outcome stops the run: a mandatory policy that did not pass.
    pub fn blocks(&self) -> bool {
        self.enforcement_level == Enforcement::Mandatory && self.status != Verdict::Passed
    }
}

fn engine(limit: Duration) -> regorus::Engine {
    let mut e = regorus::Engine::new();
    e.set_execution_timer_config(regorus::utils::limits::ExecutionTimerConfig {
        limit,
        check_interval: NonZeroU32::new(64).expect("non-zero"),
    });
    e
}

/// Deepest nesting of brackets, braces and parentheses a policy may have.
pub const MAX_NESTING: usize = 12;
/// Longest run of minus signs (with only spaces between them) a policy may have.
pub const MAX_MINUS_RUN: usize = 4;

/// Checks that `rego` stays within what the parser handles in bounded time and stack:
/// its size, the depth of nested literals and calls ([`MAX_NESTING`]; the parser's time
/// grows exponentially with it), and runs of unary minus ([`MAX_MINUS_RUN`]; each is a
/// level of recursion). Strings, raw strings and comments are skipped. Real policies nest
/// a few levels; what passes here parses in milliseconds.
pub fn check_bounds(rego: &str) -> Result<(), String> {
    if rego.len() > MAX_POLICY_BYTES {
        return Err(format!(
            "the policy is {} bytes, over the limit of {MAX_POLICY_BYTES}",
            rego.len()
        ));
    }
    let (mut depth, mut minus, mut line) = (0usize, 0usize, 1usize);
    let mut chars = rego.chars();
    while let Some(c) = chars.next() {
        match c {
            '\n' => line += 1,
            // A comment runs to the end of its line (or of the text).
            '#' => line += usize::from(chars.by_ref().any(|c| c == '\n')),
            '"' => {
                let mut escaped = false;
                for c in chars.by_ref() {
                    match c {
                        _ if escaped => escaped = false,
                        '\\' => escaped = true,
                        '"' | '\n' => break,
                        _ => {}
                    }
                }
            }
            '`' => {
                for c in chars.by_ref() {
                    match c {
                        '`' => break,
                        '\n' => line += 1,
                        _ => {}
                    }
                }
            }
            '(' | '[' | '{' => {
                depth += 1;
                if depth > MAX_NESTING {
                    return Err(format!(
                        "line {line}: nested more than {MAX_NESTING} levels deep"
                    ));
                }
            }
            ')' | ']' | '}' => depth = depth.saturating_sub(1),
            _ => {}
        }
        if c == '-' {
            minus += 1;
            if minus > MAX_MINUS_RUN {
                return Err(format!(
                    "line {line}: more than {MAX_MINUS_RUN} minus signs in a row"
                ));
            }
        } else if !matches!(c, ' ' | '\t') {
            minus = 0;
        }
    }
    Ok(())
}

/// Checks that `rego` compiles (as the API and the operator do when a policy is
/// stored); answers the compiler's words otherwise. Within [`check_bounds`] first. Rego
/// v1 and v0 are both accepted, as TFE's OPA versions accept them ([`load`]).
pub fn compile(name: &str, rego: &str) -> Result<(), String> {
    check_bounds(rego)?;
    load(name, rego, DEFAULT_TIME_LIMIT).map(|_| ())
}

/// An engine holding module `rego` (named `name`), its evaluation stopped after `limit`.
/// The module is read as Rego v1 (OPA 1.x, regorus' default) and, if that fails, as Rego
/// v0 (OPA 0.x: rules without `if`/`contains`, such as `deny[msg] { … }`; a module that
/// imports `rego.v1` is v1 in either mode): TFE evaluates policy sets with either OPA
/// generation. When neither reads it, both parsers' words are answered.
fn load(name: &str, rego: &str, limit: Duration) -> Result<regorus::Engine, String> {
    let file = format!("{name}.rego");
    let mut v1 = engine(limit);
    let v1_error = match v1.add_policy(file.clone(), rego.to_owned()) {
        Ok(_) => return Ok(v1),
        Err(e) => e.to_string(),
    };
    let mut v0 = engine(limit);
    v0.set_rego_v0(true);
    match v0.add_policy(file, rego.to_owned()) {
        Ok(_) => Ok(v0),
        Err(e) => Err(format!("{v1_error} (read as Rego v0: {e})")),
    }
}

/// Longest query accepted.
pub const MAX_QUERY_LEN: usize = 1024;

/// Checks a query's shape: a reference such as `data.terraform.deny`, or one without the
/// `data.` root (`terraform.main`, which TFE's API accepts too; see [`query_ref`]).
pub fn check_query(query: &str) -> Result<(), String> {
    let body = query.strip_prefix("data.").unwrap_or(query);
    let ok = !body.is_empty()
        && query.len() <= MAX_QUERY_LEN
        && body
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && query
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '[' | ']' | '"'))
        && !query.contains("..")
        && !query.ends_with('.')
        && query != "input"
        && !query.starts_with("input.")
        && !query.starts_with("input[");
    if ok {
        Ok(())
    } else {
        Err(format!(
            "query {query:?} must be a reference to a rule, such as data.terraform.deny (or terraform.deny), not to the input"
        ))
    }
}

/// The reference a query names: itself when it starts at `data`, else the same path
/// under `data` (`terraform.main` reads as `data.terraform.main`). TFE's API takes a query
/// without the root (go-tfe's own tests create `terraform.main`), and its docs describe a
/// query as the package and rule name; policies live under `data`, so that is where the
/// path leads.
pub fn query_ref(query: &str) -> String {
    if query == "data" || query.starts_with("data.") || query.starts_with("data[") {
        query.to_owned()
    } else {
        format!("data.{query}")
    }
}

/// TFE's OPA input document: `plan` is the engine's JSON plan, `run` the run's
/// metadata (without sensitive variable values).
pub fn input(plan: &Value, run: &RunFacts) -> Value {
    json!({
        "plan": plan,
        "run": {
            "id": run.id,
            "created_at": run.created_at,
            "message": run.message,
            "commit_sha": run.commit_sha,
            "is_destroy": run.is_destroy,
            "refresh": true,
            "refresh_only": run.refresh_only,
            "replace_addrs": run.replace_addrs,
            "speculative": run.speculative,
            "target_addrs": run.target_addrs,
            "variables": run.variables,
            "organization": {"name": run.organization},
            "workspace": {
                "id": run.workspace_id,
                "name": run.workspace,
                "execution_mode": run.execution_mode,
                "tags": run.tags,
            },
            "project": {"id": run.project_id, "name": run.project},
        },
    })
}

/// What the input document says of a run.
#[derive(Clone, Debug, Default)]
pub struct RunFacts {
    pub id: String,
    pub created_at: String,
    pub message: String,
    pub commit_sha: Option<String>,
    pub is_destroy: bool,
    pub refresh_only: bool,
    pub speculative: bool,
    pub replace_addrs: Vec<String>,
    pub target_addrs: Vec<String>,
    /// Non-sensitive variables only, by key.
    pub variables: serde_json::Map<String, Value>,
    pub organization: String,
    pub workspace_id: String,
    pub workspace: String,
    pub execution_mode: String,
    pub tags: Vec<String>,
    pub project_id: String,
    pub project: String,
}

/// Evaluates `policy` against `input`, with the policy set's `parameters` as
/// `data.parameters`, stopping it after `limit`.
pub fn evaluate(policy: &Policy, input: &Value, parameters: &Value, limit: Duration) -> Outcome {
    let outcome = |status, messages| Outcome {
        policy_name: policy.name.clone(),
        enforcement_level: policy.enforcement,
        status,
        messages,
    };
    let errored = |why: String| outcome(Verdict::Errored, vec![why]);
    if let Err(e) = check_query(&policy.query) {
        return errored(e);
    }
    if let Err(e) = check_bounds(&policy.rego) {
        return errored(format!("the policy does not compile: {e}"));
    }
    let mut e = match load(&policy.name, &policy.rego, limit) {
        Ok(e) => e,
        Err(err) => return errored(format!("the policy does not compile: {err}")),
    };
    if let Err(err) = e.add_data(regorus::Value::from(json!({"parameters": parameters}))) {
        return errored(format!("the parameters: {err}"));
    }
    e.set_input(regorus::Value::from(input.clone()));
    let results = match e.eval_query(query_ref(&policy.query), false) {
        Ok(r) => r,
        Err(err) => {
            let text = err.to_string();
            let why = if text.to_ascii_lowercase().contains("time limit")
                || text.to_ascii_lowercase().contains("execution timer")
            {
                format!(
                    "the policy ran past its limit of {} ms and was stopped",
                    limit.as_millis()
                )
            } else {
                format!("the policy failed to evaluate: {text}")
            };
            return errored(why);
        }
    };
    let value = results
        .result
        .first()
        .and_then(|r| r.expressions.first())
        .map(|x| serde_json::to_value(&x.value).unwrap_or(Value::Null));
    match value.as_ref().map(violations) {
        None | Some(None) => outcome(Verdict::Passed, Vec::new()),
        Some(Some(messages)) => outcome(Verdict::Failed, messages),
    }
}

/// The violations a query's value holds (None: none, the policy passes).
fn violations(v: &Value) -> Option<Vec<String>> {
    let items: Vec<&Value> = match v {
        Value::Null | Value::Bool(false) => return None,
        Value::Array(a) if a.is_empty() => return None,
        Value::Object(o) if o.is_empty() => return None,
        Value::String(s) if s.is_empty() => return None,
        Value::Array(a) => a.iter().collect(),
        Value::Bool(true) => return Some(Vec::new()),
        other => vec![other],
    };
    Some(
        items
            .into_iter()
            .take(MAX_MESSAGES)
            .map(|m| {
                let text = match m {
                    Value::String(s) => s.clone(),
                    Value::Object(o) => o
                        .get("msg")
                        .or_else(|| o.get("message"))
                        .and_then(Value::as_str)
                        .map_or_else(|| m.to_string(), str::to_owned),
                    other => other.to_string(),
                };
                crate::common::cut_marked(text, MAX_MESSAGE_BYTES)
            })
            .collect(),
    )
}

/// What an evaluator process is asked: the policies of one set with their Rego, the
/// input document, the set's parameters and each policy's time limit. It answers one
/// [`Outcome`] per line, in order, as each policy ends.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct EvalRequest {
    pub limit_ms: u64,
    /// Only compile each policy (a policy stored through the API): it passes when it
    /// compiles, and errors with the compiler's words otherwise.
    #[serde(default)]
    pub compile_only: bool,
    pub input: Value,
    pub parameters: Value,
    pub policies: Vec<EvalPolicy>,
}

/// One policy of an [`EvalRequest`].
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct EvalPolicy {
    pub name: String,
    pub rego: String,
    pub query: String,
    pub enforcement: Enforcement,
}

impl From<EvalPolicy> for Policy {
    fn from(p: EvalPolicy) -> Self {
        Policy {
            name: p.name,
            rego: p.rego,
            query: p.query,
            enforcement: p.enforcement,
        }
    }
}

/// An evaluator's work (`terrace policy-eval`): reads an [`EvalRequest`] from `input`,
/// evaluates each policy in turn and writes its [`Outcome`] to `output` as one JSON line,
/// flushed at once, so whoever reads knows which policy was running if the process
/// stops.
pub fn serve(mut input: impl std::io::Read, mut output: impl std::io::Write) -> Result<(), String> {
    let mut raw = Vec::new();
    input
        .read_to_end(&mut raw)
        .map_err(|e| format!("reading the request: {e}"))?;
    let req: EvalRequest =
        serde_json::from_slice(&raw).map_err(|e| format!("the request is not one: {e}"))?;
    drop(raw);
    for outcome in outcomes(req) {
        let mut line = serde_json::to_vec(&outcome).map_err(|e| e.to_string())?;
        line.push(b'\n');
        output
            .write_all(&line)
            .and_then(|()| output.flush())
            .map_err(|e| format!("writing an outcome: {e}"))?;
    }
    Ok(())
}

/// The outcome of each policy of `req`, in order, as each ends.
pub fn outcomes(req: EvalRequest) -> impl Iterator<Item = Outcome> {
    let limit = Duration::from_millis(req.limit_ms);
    req.policies.into_iter().map(move |p| {
        let p: Policy = p.into();
        if req.compile_only {
            let status = compile(&p.name, &p.rego);
            Outcome {
                policy_name: p.name,
                enforcement_level: p.enforcement,
                status: if status.is_ok() {
                    Verdict::Passed
                } else {
                    Verdict::Errored
                },
                messages: status.err().into_iter().collect(),
            }
        } else {
            evaluate(&p, &req.input, &req.parameters, limit)
        }
    })
}

/// The outcome of `name` (`enforcement`) when its evaluator stopped before answering:
/// `first` (the policy it was evaluating) ran out of memory; the others were never
/// reached.
pub fn stopped(
    name: &str,
    enforcement: Enforcement,
    first: bool,
    limit_mib: u64,
    culprit: &str,
) -> Outcome {
    Outcome {
        policy_name: name.to_owned(),
        enforcement_level: enforcement,
        status: Verdict::Errored,
        messages: vec![if first {
            format!(
                "the policy was stopped: its evaluation ran past the memory limit of {limit_mib} MiB"
            )
        } else {
            format!("not evaluated: policy {culprit} of the same set was stopped before it")
        }],
    }
}

/// What stands in a policy's message for a sensitive value of the plan.
pub const SENSITIVE_MARK: &str = "(sensitive value)";

/// `outcome` with every sensitive value of the plan (`secrets`, from
/// [`crate::run::redact::sensitive_values`]) that its messages repeat replaced by
/// [`SENSITIVE_MARK`]: the messages are shown to whoever reads the run, who may not read
/// the plan's sensitive values. Values shorter than 3 characters are left alone (they
/// would mangle every message and reveal little).
pub fn scrub(mut outcome: Outcome, secrets: &[String]) -> Outcome {
    let mut forms: Vec<String> = secrets
        .iter()
        .filter(|s| s.chars().count() >= 3)
        .flat_map(|s| printed_forms(s))
        .collect();
    forms.sort_by_key(|s| std::cmp::Reverse(s.len()));
    forms.dedup();
    for m in &mut outcome.messages {
        for s in &forms {
            if m.contains(s.as_str()) {
                *m = m.replace(s.as_str(), SENSITIVE_MARK);
            }
        }
    }
    outcome
}

/// Every form `value` takes when a policy prints it: as it is, JSON-escaped without the
/// outer quotes (`sprintf("%v", [x])` of a value with `"`, `\`, newlines or tabs), and
/// escaped twice (a JSON document printed inside another).
fn printed_forms(value: &str) -> Vec<String> {
    let escape = |s: &str| {
        let quoted = serde_json::to_string(s).unwrap_or_default();
        quoted[1..quoted.len() - 1].to_owned()
    };
    let once = escape(value);
    let twice = escape(&once);
    vec![value.to_owned(), once, twice]
}

/// A stored outcome of a policy (the run's record of it).
pub fn result_of(o: &Outcome, description: Option<String>, query: &str) -> PolicyResult {
    PolicyResult {
        policy: o.policy_name.clone(),
        description,
        enforcement_level: match o.enforcement_level {
            Enforcement::Advisory => "advisory",
            Enforcement::Mandatory => "mandatory",
        }
        .to_owned(),
        query: query.to_owned(),
        status: match o.status {
            Verdict::Passed => "passed",
            Verdict::Failed => "failed",
            Verdict::Errored => "errored",
        }
        .to_owned(),
        output: o.messages.clone(),
    }
}

/// Whether a stored outcome stops the run: a mandatory policy that did not pass.
fn blocks(r: &PolicyResult) -> bool {
    r.enforcement_level == "mandatory" && r.status != "passed"
}

/// TFE's `result-count` of some outcomes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub passed: usize,
    pub advisory_failed: usize,
    pub mandatory_failed: usize,
    pub errored: usize,
}

impl Counts {
    pub fn of<'a>(results: impl IntoIterator<Item = &'a PolicyResult>) -> Counts {
        let mut c = Counts::default();
        for r in results {
            match (r.status.as_str(), r.enforcement_level.as_str()) {
                ("passed", _) => c.passed += 1,
                ("errored", _) => c.errored += 1,
                (_, "mandatory") => c.mandatory_failed += 1,
                _ => c.advisory_failed += 1,
            }
        }
        c
    }
}

pub use crate::run::Gate;

impl RunPolicyEvaluation {
    /// Every policy's outcome.
    pub fn results(&self) -> impl Iterator<Item = &PolicyResult> {
        self.sets.iter().flat_map(|s| s.outcomes.iter())
    }

    /// The failed mandatory policies, as `set/policy`.
    pub fn blocking(&self) -> Vec<String> {
        self.sets
            .iter()
            .flat_map(|s| {
                s.outcomes
                    .iter()
                    .filter(|r| blocks(r))
                    .map(move |r| format!("{}/{}", s.name, r.policy))
            })
            .collect()
    }

    /// What the checks decide ([`Gate`]).
    pub fn gate(&self) -> Gate {
        let blocking: Vec<&PolicySetResult> = self
            .sets
            .iter()
            .filter(|s| s.outcomes.iter().any(blocks))
            .collect();
        if blocking.is_empty() || self.overridden_by.is_some() {
            Gate::Passed
        } else if blocking.iter().all(|s| s.overridable) {
            Gate::Overridable
        } else {
            Gate::Blocked
        }
    }

    /// The run's status message when its checks stop it.
    pub fn stop_message(&self) -> Option<String> {
        let blocking = self.blocking();
        (self.gate() != Gate::Passed && !blocking.is_empty())
            .then(|| format!("mandatory policies failed: {}", blocking.join(", ")))
    }

    /// TFE's status of the policy evaluation: `passed` (advisory failures included),
    /// `failed`, or `overridden`.
    pub fn status(&self) -> &'static str {
        if self.blocking().is_empty() {
            "passed"
        } else if self.overridden_by.is_some() {
            "overridden"
        } else {
            "failed"
        }
    }
}

/// TFE's status of a run's post-plan task stage: from its evaluation when it has one
/// (`passed`; `awaiting_override` while the run waits for a decision; `failed`), else
/// `pending` until the plan ends and `unreachable` (`canceled`) when the run ended
/// without an evaluation (its plan failed or changed nothing).
pub fn stage_status(
    evaluation: Option<&RunPolicyEvaluation>,
    run: crate::run::RunState,
) -> &'static str {
    use crate::run::RunState;
    match evaluation {
        Some(e) => match e.status() {
            "failed" if run == RunState::PostPlanAwaitingDecision => "awaiting_override",
            "failed" => "failed",
            _ => "passed",
        },
        None => match run {
            RunState::Pending | RunState::PlanQueued | RunState::Planning => "pending",
            RunState::Canceled | RunState::ForceCanceled => "canceled",
            _ => "unreachable",
        },
    }
}

/// The parameters of a set as `data.parameters`: a value that parses as JSON is that
/// value, any other a string.
pub fn parameters<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Value {
    Value::Object(
        pairs
            .into_iter()
            .map(|(k, v)| {
                let value = serde_json::from_str(v).unwrap_or_else(|_| Value::String(v.to_owned()));
                (k.to_owned(), value)
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(name: &str, rego: &str, query: &str, enforcement: Enforcement) -> Policy {
        Policy {
            name: name.into(),
            rego: rego.into(),
            query: query.into(),
            enforcement,
        }
    }

    /// A JSON plan with the given resource changes (`type`, `name`, `after`).
    fn plan(resources: &[(&str, &str, Value)]) -> Value {
        json!({
            "format_version": "1.2",
            "resource_changes": resources.iter().map(|(t, n, after)| json!({
                "address": format!("{t}.{n}"),
                "type": t,
                "name": n,
                "change": {"actions": ["create"], "after": after},
            })).collect::<Vec<_>>(),
        })
    }

    fn run() -> RunFacts {
        RunFacts {
            id: "run-x".into(),
            organization: "acme".into(),
            workspace: "web".into(),
            ..Default::default()
        }
    }

    const TAGS: &str = r#"
package terraform.policies.tags

import rego.v1

deny contains msg if {
    some rc in input.plan.resource_changes
    rc.type == "aws_instance"
    not rc.change.after.tags.owner
    msg := sprintf("%s has no owner tag", [rc.address])
}
"#;

    #[test]
    fn required_tags_fail_with_a_message_per_resource() {
        let p = policy(
            "tags",
            TAGS,
            "data.terraform.policies.tags.deny",
            Enforcement::Mandatory,
        );
        let bad = plan(&[
            ("aws_instance", "a", json!({"tags": {"owner": "team-a"}})),
            ("aws_instance", "b", json!({"tags": {}})),
        ]);
        let o = evaluate(&p, &input(&bad, &run()), &json!({}), DEFAULT_TIME_LIMIT);
        assert_eq!(o.status, Verdict::Failed, "{o:?}");
        assert_eq!(o.messages, ["aws_instance.b has no owner tag"]);
        assert!(o.blocks());
        let good = plan(&[("aws_instance", "a", json!({"tags": {"owner": "x"}}))]);
        let o = evaluate(&p, &input(&good, &run()), &json!({}), DEFAULT_TIME_LIMIT);
        assert_eq!(o.status, Verdict::Passed, "{o:?}");
        assert!(!o.blocks());
    }

    #[test]
    fn forbidden_resource_types_from_parameters() {
        let rego = r#"
package terraform.policies.types

import rego.v1

deny contains msg if {
    some rc in input.plan.resource_changes
    rc.type in data.parameters.forbidden
    msg := sprintf("%s: resource type %s is not allowed", [rc.address, rc.type])
}
"#;
        let p = policy(
            "types",
            rego,
            "data.terraform.policies.types.deny",
            Enforcement::Advisory,
        );
        let pl = plan(&[
            ("aws_iam_user", "u", json!({})),
            ("aws_s3_bucket", "b", json!({})),
        ]);
        let params = json!({"forbidden": ["aws_iam_user"]});
        let o = evaluate(&p, &input(&pl, &run()), &params, DEFAULT_TIME_LIMIT);
        assert_eq!(o.status, Verdict::Failed);
        assert_eq!(
            o.messages,
            ["aws_iam_user.u: resource type aws_iam_user is not allowed"]
        );
        assert!(!o.blocks(), "advisory failures warn");
        let o = evaluate(
            &p,
            &input(&pl, &run()),
            &json!({"forbidden": []}),
            DEFAULT_TIME_LIMIT,
        );
        assert_eq!(o.status, Verdict::Passed);
    }

    #[test]
    fn the_run_is_in_the_input_and_object_messages_read_as_text() {
        let rego = r#"
package terraform.runs

import rego.v1

deny contains {"msg": sprintf("no changes to %s on Fridays", [input.run.workspace.name])} if {
    input.run.organization.name == "acme"
    not input.run.speculative
}
"#;
        let p = policy(
            "friday",
            rego,
            "data.terraform.runs.deny",
            Enforcement::Mandatory,
        );
        let o = evaluate(
            &p,
            &input(&plan(&[]), &run()),
            &json!({}),
            DEFAULT_TIME_LIMIT,
        );
        assert_eq!(o.messages, ["no changes to web on Fridays"]);
        let mut spec = run();
        spec.speculative = true;
        let o = evaluate(
            &p,
            &input(&plan(&[]), &spec),
            &json!({}),
            DEFAULT_TIME_LIMIT,
        );
        assert_eq!(o.status, Verdict::Passed);
    }

    /// Rego v0 (OPA 0.x, which TFE serves too) compiles and evaluates as v0; v1 as v1;
    /// a module neither reads is refused with both parsers' words (issue 42 §10).
    #[test]
    fn rego_v0_and_v1_are_both_read() {
        let v0 = "package example\n\nrule[\"not allowed\"] { false }\n";
        assert!(compile("v0", v0).is_ok(), "{:?}", compile("v0", v0));
        let o = evaluate(
            &policy("v0", v0, "data.example.rule", Enforcement::Advisory),
            &input(&plan(&[]), &run()),
            &json!({}),
            DEFAULT_TIME_LIMIT,
        );
        assert_eq!(o.status, Verdict::Passed, "{o:?}");
        let deny_v0 = "package x\n\ndeny[msg] {\n  input.run.workspace.name == \"web\"\n  msg := \"no web\"\n}\n";
        let o = evaluate(
            &policy("d", deny_v0, "data.x.deny", Enforcement::Mandatory),
            &input(&plan(&[]), &run()),
            &json!({}),
            DEFAULT_TIME_LIMIT,
        );
        assert_eq!(
            (o.status, o.messages.clone()),
            (Verdict::Failed, vec!["no web".to_owned()])
        );
        assert!(compile("v1", TAGS).is_ok());
        let neither = compile("bad", "package x\n\ndeny[ {").unwrap_err();
        assert!(neither.contains("read as Rego v0"), "{neither}");
    }

    /// A query without the `data.` root is accepted and read under `data`, as TFE's API
    /// accepts it (issue 42 §11); junk is still refused.
    #[test]
    fn queries_without_the_data_root() {
        for q in [
            "data.terraform.deny",
            "terraform.main",
            "terraform.policy1.deny",
            "x",
        ] {
            assert!(check_query(q).is_ok(), "{q}");
        }
        for q in [
            "",
            "data.",
            ".x",
            "x..y",
            "x.",
            "1x",
            "x y",
            "data.x; y",
            "input.plan",
        ] {
            assert!(check_query(q).is_err(), "{q:?}");
        }
        assert_eq!(query_ref("terraform.main"), "data.terraform.main");
        assert_eq!(query_ref("data.terraform.main"), "data.terraform.main");
        let p = policy(
            "tags",
            TAGS,
            "terraform.policies.tags.deny",
            Enforcement::Mandatory,
        );
        let bad = plan(&[("aws_instance", "b", json!({"tags": {}}))]);
        let o = evaluate(&p, &input(&bad, &run()), &json!({}), DEFAULT_TIME_LIMIT);
        assert_eq!(o.status, Verdict::Failed, "{o:?}");
    }

    #[test]
    fn broken_or_endless_policies_error_with_a_reason() {
        assert!(compile("bad", "package x\n\ndeny contains msg if {").is_err());
        assert!(compile("minus", &format!("package x\n\nx := {}1", "-".repeat(1000))).is_err());
        let nested = format!("package x\n\nx := {}1{}", "[".repeat(24), "]".repeat(24));
        let err = compile("nested", &nested).unwrap_err();
        assert!(err.contains("nested more than"), "{err}");
        let braces = format!("package x\n\nx := {}", "{\"a\": ".repeat(30));
        assert!(compile("braces", &braces).is_err());
        assert!(compile("ok", TAGS).is_ok());
        let bad = policy(
            "bad",
            "package x\n deny[",
            "data.x.deny",
            Enforcement::Mandatory,
        );
        let o = evaluate(&bad, &json!({}), &json!({}), DEFAULT_TIME_LIMIT);
        assert_eq!(o.status, Verdict::Errored);
        assert!(o.messages[0].contains("does not compile"), "{o:?}");
        assert!(o.blocks(), "a mandatory policy that errors stops the run");
        // Nested iteration over 25 million pairs: stopped by the time limit.
        let slow = r#"
package slow

import rego.v1

deny contains x if {
    some a in numbers.range(1, 5000)
    some b in numbers.range(1, 5000)
    x := a * b
    x < 0
}
"#;
        let p = policy("slow", slow, "data.slow.deny", Enforcement::Advisory);
        let started = std::time::Instant::now();
        let o = evaluate(&p, &json!({}), &json!({}), Duration::from_millis(200));
        assert_eq!(o.status, Verdict::Errored, "{o:?}");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
        let q = policy("q", TAGS, "input.plan", Enforcement::Advisory);
        assert!(
            evaluate(&q, &json!({}), &json!({}), DEFAULT_TIME_LIMIT).messages[0]
                .contains("reference to a rule")
        );
    }

    #[test]
    fn empty_false_and_undefined_pass_true_fails() {
        assert_eq!(violations(&json!([])), None);
        assert_eq!(violations(&json!(false)), None);
        assert_eq!(violations(&Value::Null), None);
        assert_eq!(violations(&json!(true)), Some(vec![]));
        assert_eq!(
            violations(&json!(["a", 1])),
            Some(vec!["a".into(), "1".into()])
        );
    }

    fn set(name: &str, overridable: bool, outcomes: &[(&str, &str)]) -> PolicySetResult {
        PolicySetResult {
            name: name.into(),
            object: name.into(),
            description: None,
            overridable,
            error: None,
            outcomes: outcomes
                .iter()
                .enumerate()
                .map(|(i, (level, status))| PolicyResult {
                    policy: format!("p{i}"),
                    description: None,
                    enforcement_level: (*level).into(),
                    query: "data.x.deny".into(),
                    status: (*status).into(),
                    output: vec![],
                })
                .collect(),
        }
    }

    fn eval(sets: Vec<PolicySetResult>) -> RunPolicyEvaluation {
        RunPolicyEvaluation {
            evaluated_at: "2026-01-01T00:00:00Z".into(),
            sets,
            ..Default::default()
        }
    }

    #[test]
    fn mandatory_failures_stop_a_run_unless_overridable_and_overridden() {
        use crate::run::{Flags, RunState, after_successful_plan};
        let advisory = eval(vec![set(
            "a",
            false,
            &[("advisory", "failed"), ("mandatory", "passed")],
        )]);
        assert_eq!(advisory.gate(), Gate::Passed);
        assert_eq!(advisory.status(), "passed");
        assert_eq!(
            Counts::of(advisory.results()),
            Counts {
                passed: 1,
                advisory_failed: 1,
                ..Counts::default()
            }
        );
        let hard = eval(vec![
            set("soft", true, &[("mandatory", "failed")]),
            set("hard", false, &[("mandatory", "errored")]),
        ]);
        assert_eq!(hard.gate(), Gate::Blocked);
        assert_eq!(
            hard.stop_message().unwrap(),
            "mandatory policies failed: soft/p0, hard/p0"
        );
        let mut soft = eval(vec![
            set("soft", true, &[("mandatory", "failed")]),
            set("ok", false, &[("mandatory", "passed")]),
        ]);
        assert_eq!(soft.gate(), Gate::Overridable);
        assert_eq!(
            stage_status(Some(&soft), RunState::PostPlanAwaitingDecision),
            "awaiting_override"
        );
        assert_eq!(stage_status(Some(&soft), RunState::Discarded), "failed");
        soft.overridden_by = Some("user:alice".into());
        assert_eq!((soft.gate(), soft.status()), (Gate::Passed, "overridden"));
        assert_eq!(
            stage_status(Some(&soft), RunState::PostPlanCompleted),
            "passed"
        );
        assert_eq!(stage_status(None, RunState::Planning), "pending");
        assert_eq!(
            stage_status(None, RunState::PlannedAndFinished),
            "unreachable"
        );

        let flags = |policy, plan_only, auto_apply| Flags {
            policy,
            plan_only,
            auto_apply,
            ..Flags::default()
        };
        assert_eq!(
            after_successful_plan(true, flags(Gate::Blocked, false, true)),
            RunState::Errored
        );
        assert_eq!(
            after_successful_plan(true, flags(Gate::Overridable, false, false)),
            RunState::PostPlanAwaitingDecision
        );
        assert_eq!(
            after_successful_plan(true, flags(Gate::Passed, false, false)),
            RunState::PostPlanCompleted
        );
        assert_eq!(
            after_successful_plan(true, flags(Gate::Passed, false, true)),
            RunState::Confirmed
        );
        assert_eq!(
            after_successful_plan(true, flags(Gate::None, false, false)),
            RunState::Planned
        );
        // A speculative plan never blocks anything.
        assert_eq!(
            after_successful_plan(true, flags(Gate::Blocked, true, false)),
            RunState::PlannedAndFinished
        );
        assert!(
            RunState::PostPlanCompleted.is_confirmable()
                && !RunState::PostPlanAwaitingDecision.is_confirmable()
        );
        assert!(RunState::PostPlanAwaitingDecision.is_discardable());
    }

    #[test]
    fn parameters_are_json_when_they_parse() {
        assert_eq!(
            parameters([("sizes", r#"["xl"]"#), ("owner", "team-a"), ("n", "3")]),
            json!({"sizes": ["xl"], "owner": "team-a", "n": 3})
        );
    }

    #[test]
    fn a_set_applies_by_scope_less_its_exclusions() {
        use crate::resources::{Named, PolicySetSpec};
        let ws = Named {
            id: Some("ws-1"),
            name: "web",
        };
        let prj = Named {
            id: Some("prj-1"),
            name: "shop",
        };
        let mut s = PolicySetSpec {
            projects: vec!["shop".into()],
            ..Default::default()
        };
        assert!(s.applies_to(ws, Some(prj)));
        assert!(!s.applies_to(
            ws,
            Some(Named {
                id: Some("prj-2"),
                name: "other"
            })
        ));
        s.workspace_exclusions = vec!["ws-1".into()];
        assert!(!s.applies_to(ws, Some(prj)));
        let mut g = PolicySetSpec {
            global: true,
            ..Default::default()
        };
        assert!(g.applies_to(ws, None));
        g.project_exclusions = vec!["shop".into()];
        assert!(!g.applies_to(ws, Some(prj)));
        g.workspaces = vec!["web".into()];
        assert!(
            g.applies_to(ws, Some(prj)),
            "named, so the project's exclusion does not count"
        );
    }

    #[test]
    fn messages_never_repeat_the_plans_sensitive_values() {
        let plan = json!({
            "resource_changes": [{
                "address": "db.main",
                "change": {
                    "actions": ["create"],
                    "after": {"password": "hunter2-secret", "name": "main", "tags": {"k": "tagvalue"}},
                    "after_sensitive": {"password": true, "tags": {"k": true}},
                },
            }],
            "variables": {"token": {"value": "tok-123456"}, "region": {"value": "eu-west-1"}},
            "configuration": {"root_module": {"variables": {"token": {"sensitive": true}, "region": {}}}},
            "prior_state": {"values": {"root_module": {"resources": [
                {"values": {"key": "old-private-key"}, "sensitive_values": {"key": true}}
            ]}}},
        });
        let secrets = crate::run::redact::sensitive_values(&plan);
        for s in [
            "hunter2-secret",
            "tagvalue",
            "tok-123456",
            "old-private-key",
        ] {
            assert!(secrets.iter().any(|x| x == s), "{s} in {secrets:?}");
        }
        assert!(
            !secrets.iter().any(|x| x == "main" || x == "eu-west-1"),
            "{secrets:?}"
        );
        let o = Outcome {
            policy_name: "p".into(),
            enforcement_level: Enforcement::Mandatory,
            status: Verdict::Failed,
            messages: vec![
                "db.main has password hunter2-secret in eu-west-1 (token tok-123456)".into(),
            ],
        };
        assert_eq!(
            scrub(o, &secrets).messages,
            vec!["db.main has password (sensitive value) in eu-west-1 (token (sensitive value))"]
        );
    }

    /// Issue 39 §2: random Rego texts (nested literals, calls, comprehensions, unary
    /// minus, strings and comments, in any mix) either compile or are refused, on a thread
    /// with a blocking thread's stack (2 MiB): never a stack overflow, never a parse that
    /// runs for seconds. The bounds skip strings and comments, so those never refuse a
    /// policy.
    #[test]
    fn rego_texts_at_random_compile_or_are_refused_within_bounds() {
        std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(|| {
                use rand::{Rng, SeedableRng};
                let mut rng = rand::rngs::StdRng::seed_from_u64(39);
                let pieces = [
                    "[",
                    "]",
                    "{",
                    "}",
                    "(",
                    ")",
                    "-",
                    "- ",
                    "1",
                    "x",
                    ",",
                    ":",
                    " | ",
                    "\"s\"",
                    "\"[[[[\"",
                    "# ((((\n",
                    "`{{{`",
                    "count(",
                    "not ",
                    " + ",
                    "\n",
                    ":= ",
                    "some i in ",
                    "input.a",
                    "{\"k\": ",
                ];
                for _ in 0..3_000 {
                    let n = rng.random_range(1..60);
                    let body: String = (0..n)
                        .map(|_| pieces[rng.random_range(0..pieces.len())])
                        .collect();
                    let text = format!("package p\n\nr := {body}\n");
                    let _ = compile("fuzz", &text);
                }
                let strings = format!(
                    "package p\n\n# {}\nr := \"{}\"\n",
                    "[".repeat(100),
                    "-".repeat(100)
                );
                assert_eq!(compile("strings", &strings), Ok(()));
                for open in ["[", "{\"k\": ", "("] {
                    let close = match open {
                        "[" => "]",
                        "(" => ")",
                        _ => "}",
                    };
                    let at_limit = format!(
                        "package p\n\nr := {}1{}\n",
                        open.repeat(MAX_NESTING),
                        close.repeat(MAX_NESTING)
                    );
                    assert_eq!(compile("deep", &at_limit), Ok(()), "{at_limit}");
                }
            })
            .unwrap()
            .join()
            .expect("no compile overflows its stack");
    }

    /// Issue 39 §4: a value with quotes, backslashes, newlines or tabs, printed by a
    /// policy as JSON (`sprintf("%v", [x])`), is scrubbed in its escaped forms too.
    #[test]
    fn escaped_forms_of_sensitive_values_are_scrubbed() {
        let secret = "x\"qq\\zz\nkk\tyy".to_owned();
        let printed = serde_json::to_string(&json!({"after": {"password": secret}})).unwrap();
        let nested = serde_json::to_string(&printed).unwrap();
        let o = Outcome {
            policy_name: "p".into(),
            enforcement_level: Enforcement::Mandatory,
            status: Verdict::Failed,
            messages: vec![printed, nested, format!("raw {secret}")],
        };
        let out = scrub(o, std::slice::from_ref(&secret)).messages;
        for m in &out {
            assert!(m.contains(SENSITIVE_MARK), "{m}");
            for frag in ["qq", "zz", "kk", "yy"] {
                assert!(!m.contains(frag), "{m}");
            }
        }
    }
}
