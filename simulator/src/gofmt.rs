//! Values as kube-apiserver's Go code prints them in its messages: `strconv.Quote`
//! (`%q`), a `[]string` under `%q`, a bad value in a `field.Error`, and JSON with its
//! object keys sorted (Go's `encoding/json`). The schema validator, the CEL rules and the
//! authorization messages all write their words through these.

use serde_json::Value;

/// Renders a bad value as `field.Error.ErrorBody` does: numbers and booleans plainly,
/// strings Go-quoted, anything else as JSON (keys sorted, as Go's encoding/json).
pub fn render(v: &Value) -> String {
    match v {
        Value::String(s) => go_quote(s),
        Value::Number(n) => number_text(n),
        Value::Bool(b) => b.to_string(),
        other => canonical_json(other),
    }
}

fn number_text(n: &serde_json::Number) -> String {
    if let Some(i) = n.as_i64() {
        i.to_string()
    } else if let Some(u) = n.as_u64() {
        u.to_string()
    } else {
        crate::table::go_float(n.as_f64().unwrap_or(0.0))
    }
}

/// JSON with object keys sorted, whatever serde_json's map order is.
pub fn canonical_json(v: &Value) -> String {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let parts: Vec<String> = keys
                .into_iter()
                .map(|k| {
                    format!(
                        "{}:{}",
                        serde_json::to_string(k).unwrap_or_default(),
                        canonical_json(&m[k])
                    )
                })
                .collect();
            format!("{{{}}}", parts.join(","))
        }
        Value::Array(a) => format!(
            "[{}]",
            a.iter().map(canonical_json).collect::<Vec<_>>().join(",")
        ),
        Value::Number(n) => number_text(n),
        other => serde_json::to_string(other).unwrap_or_default(),
    }
}

/// Go's `strconv.Quote`.
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Go's `%q` of a `[]string`: `["a" "b"]`.
pub fn go_quote_list(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| go_quote(s)).collect();
    format!("[{}]", quoted.join(" "))
}
