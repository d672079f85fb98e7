//! The API server's runner endpoints of one run, as the runner calls them.

use std::time::Duration;

use super::error::{StepError, step};

/// The API server's runner endpoints of one run.
#[derive(Clone)]
pub struct Api {
    agent: ureq::Agent,
    base: String,
    token: String,
}

impl Api {
    pub fn new(api: &str, run: &str, token: String) -> Self {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_secs(600)))
            .http_status_as_error(false)
            .build()
            .into();
        Self {
            agent,
            base: format!("{}/api/v2/runner/runs/{run}", api.trim_end_matches('/')),
            token,
        }
    }

    fn url(&self, what: &str) -> String {
        format!("{}/{what}", self.base)
    }

    /// GETs `what`: its body, or `None` for 204/404.
    pub fn get(&self, what: &str, limit: u64) -> Result<Option<Vec<u8>>, StepError> {
        let resp = self
            .agent
            .get(&self.url(what))
            .header("Authorization", format!("Bearer {}", self.token))
            .call()
            .map_err(step(&format!("downloading the {what}")))?;
        let status = resp.status().as_u16();
        if status == 204 || status == 404 {
            return Ok(None);
        }
        let mut body = resp.into_body();
        let bytes = body
            .with_config()
            .limit(limit)
            .read_to_vec()
            .map_err(step(&format!("downloading the {what}")))?;
        if !(200..300).contains(&status) {
            return Err(StepError(format!(
                "downloading the {what}: HTTP {status}: {}",
                String::from_utf8_lossy(&bytes)
                    .chars()
                    .take(300)
                    .collect::<String>()
            )));
        }
        Ok(Some(bytes))
    }

    pub fn put(&self, what: &str, bytes: &[u8]) -> Result<(), StepError> {
        let resp = self
            .agent
            .put(&self.url(what))
            .header("Authorization", format!("Bearer {}", self.token))
            .header("Content-Type", "application/octet-stream")
            .send(bytes)
            .map_err(step(&format!("uploading the {what}")))?;
        let status = resp.status().as_u16();
        if (200..300).contains(&status) {
            return Ok(());
        }
        let text = resp.into_body().read_to_string().unwrap_or_default();
        Err(StepError(format!(
            "uploading the {what}: HTTP {status}: {}",
            error_detail(&text)
        )))
    }
}

/// The `detail` of a JSON:API error answer, else the text itself (cut).
fn error_detail(text: &str) -> String {
    serde_json::from_str::<serde_json::Value>(text)
        .ok()
        .and_then(|v| v["errors"][0]["detail"].as_str().map(str::to_owned))
        .unwrap_or_else(|| text.chars().take(300).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_details() {
        assert_eq!(
            error_detail(r#"{"errors":[{"status":"409","detail":"locked"}]}"#),
            "locked"
        );
        assert_eq!(error_detail("plain"), "plain");
    }
}
