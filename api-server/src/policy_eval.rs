//! Policies are compiled and evaluated in a `terrace policy-eval` process of their own
//! (issue 30, issue 39 §2): under an address-space limit (`--policy-memory-limit-mib`) and
//! a deadline, so a policy that allocates without end, or a text the Rego parser cannot
//! handle, stops that process and never the API server. Without an evaluator (the
//! crate's own tests) the work runs on a blocking thread, within
//! [`terrace_crds::policy::check_bounds`] all the same.

use std::time::Duration;

use terrace_crds::policy::{self, Enforcement};

/// Longest a compile check may take in the evaluator.
const COMPILE_DEADLINE: Duration = Duration::from_secs(10);

/// Checks that policy `name`'s Rego compiles, in the evaluator (the compiler's words,
/// or why the evaluator stopped, otherwise).
pub async fn compile(settings: &crate::Settings, name: &str, rego: &str) -> Result<(), String> {
    policy::check_bounds(rego)?;
    let request = policy::EvalRequest {
        limit_ms: COMPILE_DEADLINE.as_millis() as u64,
        input: serde_json::Value::Null,
        parameters: serde_json::Value::Null,
        compile_only: true,
        policies: vec![policy::EvalPolicy {
            name: name.to_owned(),
            rego: rego.to_owned(),
            query: "data".to_owned(),
            enforcement: Enforcement::Advisory,
        }],
    };
    let outcome = evaluate(settings, request).await.into_iter().next();
    match outcome {
        Some(o) if o.status == policy::Verdict::Passed => Ok(()),
        Some(o) => Err(o.messages.join("; ")),
        None => Err("the policy evaluator did not answer".to_owned()),
    }
}

/// The outcome of each policy of `request`, in order: in a `terrace policy-eval` process
/// under the memory limit when the settings name the evaluator, else on a blocking
/// thread. A process that stops early (past its memory limit) errors the policy it was
/// evaluating and the ones after it; one past every policy's time limit is killed.
pub async fn evaluate(
    settings: &crate::Settings,
    request: policy::EvalRequest,
) -> Vec<policy::Outcome> {
    let names: Vec<(String, Enforcement)> = request
        .policies
        .iter()
        .map(|p| (p.name.clone(), p.enforcement))
        .collect();
    let Some(exe) = settings.policy_evaluator.clone() else {
        let done =
            tokio::task::spawn_blocking(move || policy::outcomes(request).collect::<Vec<_>>())
                .await;
        return done.unwrap_or_default();
    };
    let limit_mib = settings.policy_memory_limit_mib;
    let deadline =
        Duration::from_millis(request.limit_ms) * (names.len() as u32) + Duration::from_secs(10);
    let mut outcomes = Vec::new();
    let ran = tokio::time::timeout(
        deadline,
        run_evaluator(&exe, limit_mib, request, &mut outcomes),
    )
    .await;
    let why = match ran {
        Ok(Ok(())) if outcomes.len() == names.len() => return outcomes,
        Ok(Ok(())) => None,
        Ok(Err(e)) => Some(e),
        Err(_) => {
            Some("the evaluator ran past every policy's time limit and was stopped".to_owned())
        }
    };
    if let Some(e) = &why {
        tracing::warn!(error = %e, "a policy evaluator stopped early");
    }
    let first = outcomes.len();
    let culprit = names.get(first).map(|(n, _)| n.clone()).unwrap_or_default();
    for (i, (name, level)) in names.iter().enumerate().skip(first) {
        let mut o = policy::stopped(name, *level, i == first, limit_mib, &culprit);
        if let (Some(e), true) = (&why, i == first) {
            o.messages = vec![e.clone()];
        }
        outcomes.push(o);
    }
    outcomes
}

/// Runs `exe policy-eval` on `request`, gathering the outcomes it answers into `out`; an
/// error says why it could not start or answered garbage (a process that ends early
/// with nothing more to say is not an error: the caller sees the missing outcomes).
async fn run_evaluator(
    exe: &std::path::Path,
    limit_mib: u64,
    request: policy::EvalRequest,
    out: &mut Vec<policy::Outcome>,
) -> Result<(), String> {
    use std::process::Stdio;
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let body = serde_json::to_vec(&request).map_err(|e| format!("the evaluator's request: {e}"))?;
    let mut child = tokio::process::Command::new(exe)
        .args(["policy-eval", "--memory-limit-mib", &limit_mib.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("the policy evaluator could not start: {e}"))?;
    let mut stdin = child.stdin.take().ok_or("the evaluator has no stdin")?;
    let writer = tokio::spawn(async move {
        let _ = stdin.write_all(&body).await;
        let _ = stdin.shutdown().await;
    });
    let stdout = child.stdout.take().ok_or("the evaluator has no stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    while let Some(line) = lines
        .next_line()
        .await
        .map_err(|e| format!("reading the evaluator: {e}"))?
    {
        let o: policy::Outcome =
            serde_json::from_str(&line).map_err(|e| format!("the evaluator answered {e}"))?;
        out.push(o);
    }
    let _ = writer.await;
    let _ = child.wait().await;
    Ok(())
}
