//! A run phase's log as people read it. With structured run output the engine writes its
//! `-json` UI: one JSON object per line (`{"@level":"info","@message":"Plan: 1 to add…",
//! "type":"change_summary",…}`). The terraform CLI renders those lines itself; every other
//! reader (curl, pytfe, the web view) gets [`readable`]: each JSON line as its
//! `@message`, a diagnostic with its detail, other lines (the runner's own) as they are.
//!
//! The API serves logs in `limit`/`offset` byte windows of a log that grows while the
//! phase runs, so the readable text of a log's prefix must be a prefix of the readable
//! text of the whole: only complete lines are rendered, and a trailing line still being
//! written is held back until it ends (or the phase is final).

use serde_json::Value;

/// The readable text of `log`; `finished`: nothing more will be written, so a last line
/// without its newline is complete.
pub fn readable(log: &[u8], finished: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(log.len() / 2);
    let mut rest = log;
    while !rest.is_empty() {
        let (line, next, complete) = match rest.iter().position(|b| *b == b'\n') {
            Some(i) => (&rest[..i], &rest[i + 1..], true),
            None => (rest, &rest[rest.len()..], finished),
        };
        if !complete {
            break;
        }
        render_line(line, &mut out);
        rest = next;
    }
    out
}

/// The engine's errors in readable log text (see [`readable`]): each `Error: SUMMARY`
/// with what follows it (where, and the detail) as one line, at most 5 of them, each cut
/// at 1,000 characters. What a run's page shows as the cause of an errored run.
pub fn errors(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut current: Option<Vec<&str>> = None;
    let mut blanks = 0;
    let flush = |current: &mut Option<Vec<&str>>, out: &mut Vec<String>| {
        if let Some(parts) = current.take() {
            let joined = parts.join(" ");
            let cut: String = joined.chars().take(1_000).collect();
            out.push(if cut.len() < joined.len() {
                format!("{cut}…")
            } else {
                cut
            });
        }
    };
    for raw in text.lines() {
        let line = raw.trim_start_matches(['│', '╷', '╵']).trim();
        if line.starts_with("Error: ") {
            flush(&mut current, &mut out);
            current = Some(vec![line]);
            blanks = 0;
            continue;
        }
        let Some(parts) = current.as_mut() else {
            continue;
        };
        if line.is_empty() {
            blanks += 1;
            if blanks >= 2 {
                flush(&mut current, &mut out);
            }
        } else if line.starts_with("terrace:") || line.starts_with("Warning: ") {
            flush(&mut current, &mut out);
        } else {
            blanks = 0;
            parts.push(line);
        }
    }
    flush(&mut current, &mut out);
    out.truncate(5);
    out
}

/// One line: a UI message rendered, anything else kept.
fn render_line(line: &[u8], out: &mut Vec<u8>) {
    let parsed = (line.first() == Some(&b'{'))
        .then(|| serde_json::from_slice::<Value>(line).ok())
        .flatten()
        .filter(|v| v.get("@message").is_some_and(Value::is_string));
    let Some(v) = parsed else {
        out.extend_from_slice(line);
        out.push(b'\n');
        return;
    };
    let message = v["@message"].as_str().unwrap_or_default();
    match v["type"].as_str() {
        // The engine's version line: the runner's preamble says it already.
        Some("version") => {}
        Some("diagnostic") => {
            let d = &v["diagnostic"];
            let severity = match d["severity"].as_str() {
                Some("error") => "Error",
                Some("warning") => "Warning",
                _ => "Note",
            };
            let summary = d["summary"].as_str().unwrap_or(message);
            out.extend_from_slice(format!("\n{severity}: {summary}\n").as_bytes());
            if let Some(range) = d["range"]["filename"].as_str() {
                let line_no = d["range"]["start"]["line"].as_i64().unwrap_or(0);
                out.extend_from_slice(format!("\n  on {range} line {line_no}\n").as_bytes());
            }
            if let Some(detail) = d["detail"].as_str().filter(|s| !s.is_empty()) {
                out.extend_from_slice(format!("\n{detail}\n").as_bytes());
            }
            out.push(b'\n');
        }
        Some("change_summary") => {
            out.extend_from_slice(format!("\n{message}\n\n").as_bytes());
        }
        Some("outputs") => {
            let outputs = v["outputs"].as_object();
            if outputs.is_some_and(|o| !o.is_empty()) {
                out.extend_from_slice(b"Outputs:\n\n");
                for (name, o) in outputs.into_iter().flatten() {
                    let value = if o["sensitive"].as_bool() == Some(true) {
                        "(sensitive value)".to_owned()
                    } else {
                        match &o["value"] {
                            Value::Null => "(known after apply)".to_owned(),
                            val => val.to_string(),
                        }
                    };
                    out.extend_from_slice(format!("{name} = {value}\n").as_bytes());
                }
            }
        }
        _ => {
            out.extend_from_slice(message.as_bytes());
            out.push(b'\n');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PLAN: &str = concat!(
        "Terraform v1.11.4\n",
        r#"{"@level":"info","@message":"Terraform 1.11.4","type":"version","terraform":"1.11.4","ui":"1.2"}"#,
        "\n",
        r#"{"@level":"info","@message":"terraform_data.x: Plan to create","type":"planned_change","change":{}}"#,
        "\n",
        r#"{"@level":"info","@message":"Plan: 1 to add, 0 to change, 0 to destroy.","type":"change_summary"}"#,
        "\n",
        r#"{"@level":"info","@message":"Outputs: 2","type":"outputs","outputs":{"a":{"sensitive":false,"value":"x"},"s":{"sensitive":true,"value":"hidden"}}}"#,
        "\n",
        r#"{"@level":"error","@message":"Error: Invalid reference","type":"diagnostic","diagnostic":{"severity":"error","summary":"Invalid reference","detail":"A reference to a resource type must be followed by at least one attribute access.","range":{"filename":"main.tf","start":{"line":3}}}}"#,
        "\n",
    );

    #[test]
    fn json_ui_lines_read_as_text() {
        let text = String::from_utf8(readable(PLAN.as_bytes(), true)).unwrap();
        assert!(
            text.starts_with("Terraform v1.11.4\nterraform_data.x: Plan to create\n"),
            "{text}"
        );
        assert!(
            text.contains("\nPlan: 1 to add, 0 to change, 0 to destroy.\n"),
            "{text}"
        );
        assert!(
            text.contains("a = \"x\"\ns = (sensitive value)\n"),
            "{text}"
        );
        assert!(
            !text.contains("hidden"),
            "a sensitive output's value: {text}"
        );
        assert!(
            text.contains("Error: Invalid reference\n\n  on main.tf line 3\n"),
            "{text}"
        );
        assert!(text.contains("at least one attribute access"), "{text}");
        assert!(!text.contains("{\"@"), "{text}");
    }

    #[test]
    fn a_growing_log_reads_as_a_growing_text() {
        let whole = readable(PLAN.as_bytes(), true);
        for cut in 0..PLAN.len() {
            let part = readable(&PLAN.as_bytes()[..cut], false);
            assert!(whole.starts_with(&part), "prefix at {cut}");
        }
        // A last line without its newline is held back until the phase is final.
        let unfinished = b"line one\n{\"@message\":\"half";
        assert_eq!(readable(unfinished, false), b"line one\n");
        assert_eq!(
            readable(b"plain text, no newline", true),
            b"plain text, no newline\n"
        );
    }

    /// An errored run's page shows the engine's error, not only "the plan failed".
    #[test]
    fn the_engines_errors_are_found_in_a_readable_log() {
        let log = "Terraform v1.11.4\nInitializing plugins and modules...\n\nError: Reference to undeclared input variable\n\n  on main.tf line 2\n\nAn input variable with the name \"missing\" has not been declared.\n\n\nterrace: the plan failed\n";
        assert_eq!(
            errors(log),
            [
                "Error: Reference to undeclared input variable on main.tf line 2 An input variable with the name \"missing\" has not been declared."
            ]
        );
        let boxed = "╷\n│ Error: Unsupported argument\n│\n│   on main.tf line 3:\n╵\n╷\n│ Error: Missing name\n╵\n";
        assert_eq!(
            errors(boxed),
            [
                "Error: Unsupported argument on main.tf line 3:",
                "Error: Missing name"
            ]
        );
        assert!(errors("Apply complete!\n").is_empty());
    }
}
