//! The JSONPath subset that `additionalPrinterColumns` use, as client-go's `util/jsonpath`
//! evaluates them for kube-apiserver's CRD table convertor.
//!
//! A column's `jsonPath` (e.g. `.spec.name`, `.metadata.annotations.terrace\.dev/locked-by`,
//! `.status.conditions[?(@.type=="Ready")].status`) is parsed once into a [`JsonPath`] and
//! then evaluated against each object of a list to produce the table's cells. Supported:
//! field steps (`.a`, with `\.` escaping a dot inside a key), bracket keys (`['a.b']`),
//! indexes (`[0]`, negative from the end), wildcards (`[*]`, `.*`), recursive descent is
//! not supported, and filters of the form `[?(@.path == "literal")]` / `!=` /
//! `[?(@.path)]` (existence). Missing keys yield no result, as with
//! `AllowMissingKeys(true)`, which is what the table convertor sets.

use serde_json::Value;

/// One step of a parsed path.
#[derive(Clone, Debug, PartialEq)]
enum Step {
    /// A map key.
    Key(String),
    /// A list index; negative counts from the end.
    Index(i64),
    /// Every element of a list, or every value of a map.
    Wildcard,
    /// Elements of a list for which the filter holds.
    Filter(Filter),
}

#[derive(Clone, Debug, PartialEq)]
struct Filter {
    /// Path relative to `@`.
    path: Vec<Step>,
    /// `None` tests for existence.
    compare: Option<(bool /* equal */, Value)>,
}

/// A parsed JSONPath expression.
#[derive(Clone, Debug, PartialEq)]
pub struct JsonPath {
    steps: Vec<Step>,
}

impl JsonPath {
    /// Parses a printer-column path. Accepts an optional `{...}` template wrapper and an
    /// optional leading `$`, as kubectl and the apiserver do.
    pub fn parse(source: &str) -> Result<JsonPath, String> {
        let mut s = source.trim();
        if let Some(inner) = s.strip_prefix('{') {
            s = inner
                .strip_suffix('}')
                .ok_or_else(|| format!("unclosed action in {source:?}"))?
                .trim();
        }
        let s = s.strip_prefix('$').unwrap_or(s);
        let chars: Vec<char> = s.chars().collect();
        let mut pos = 0;
        let steps = parse_steps(&chars, &mut pos, false)
            .map_err(|e| format!("unrecognized JSONPath {source:?}: {e}"))?;
        if pos != chars.len() {
            return Err(format!(
                "unrecognized JSONPath {source:?}: unexpected {:?}",
                chars[pos]
            ));
        }
        Ok(JsonPath { steps })
    }

    /// All values the path selects in `root`, in document order. Missing keys select
    /// nothing.
    pub fn find<'a>(&self, root: &'a Value) -> Vec<&'a Value> {
        eval(&self.steps, root)
    }
}

/// Parses `path` and returns the values it selects in `root`.
pub fn find<'a>(path: &str, root: &'a Value) -> Result<Vec<&'a Value>, String> {
    Ok(JsonPath::parse(path)?.find(root))
}

fn eval<'a>(steps: &[Step], root: &'a Value) -> Vec<&'a Value> {
    let mut current = vec![root];
    for step in steps {
        let mut next = Vec::new();
        for v in current {
            match step {
                Step::Key(k) => {
                    if let Some(x) = v.as_object().and_then(|m| m.get(k)) {
                        next.push(x);
                    }
                }
                Step::Index(i) => {
                    if let Some(list) = v.as_array() {
                        let len = list.len() as i64;
                        let idx = if *i < 0 { len + *i } else { *i };
                        if (0..len).contains(&idx) {
                            next.push(&list[idx as usize]);
                        }
                    }
                }
                Step::Wildcard => match v {
                    Value::Array(list) => next.extend(list.iter()),
                    Value::Object(map) => next.extend(map.values()),
                    _ => {}
                },
                Step::Filter(f) => {
                    if let Some(list) = v.as_array() {
                        for item in list {
                            let found = eval(&f.path, item);
                            let keep = match &f.compare {
                                None => !found.is_empty(),
                                Some((equal, lit)) => {
                                    let matched = found.iter().any(|x| values_equal(x, lit));
                                    if *equal {
                                        matched
                                    } else {
                                        !found.is_empty() && !matched
                                    }
                                }
                            };
                            if keep {
                                next.push(item);
                            }
                        }
                    }
                }
            }
        }
        current = next;
    }
    current
}

fn values_equal(a: &Value, b: &Value) -> bool {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}

/// Parses steps until the end of input, or (inside a filter) until `)`, `=` or `!`.
fn parse_steps(chars: &[char], pos: &mut usize, in_filter: bool) -> Result<Vec<Step>, String> {
    let mut steps = Vec::new();
    while *pos < chars.len() {
        match chars[*pos] {
            '.' => {
                *pos += 1;
                if *pos < chars.len() && chars[*pos] == '.' {
                    return Err("recursive descent is not supported".into());
                }
                if *pos < chars.len() && chars[*pos] == '*' {
                    *pos += 1;
                    steps.push(Step::Wildcard);
                    continue;
                }
                let key = parse_key(chars, pos, in_filter);
                if key.is_empty() {
                    // A lone `.` (the whole object) is allowed at the end.
                    if *pos >= chars.len() {
                        break;
                    }
                    if chars[*pos] == '[' {
                        continue;
                    }
                    return Err("empty field name".into());
                }
                steps.push(Step::Key(key));
            }
            '[' => {
                *pos += 1;
                steps.push(parse_bracket(chars, pos)?);
            }
            c if in_filter && (c == ')' || c == '=' || c == '!' || c == ' ') => break,
            c => return Err(format!("unexpected {c:?}")),
        }
    }
    Ok(steps)
}

fn parse_key(chars: &[char], pos: &mut usize, in_filter: bool) -> String {
    let mut key = String::new();
    while *pos < chars.len() {
        let c = chars[*pos];
        if c == '\\' && *pos + 1 < chars.len() {
            key.push(chars[*pos + 1]);
            *pos += 2;
            continue;
        }
        if c == '.' || c == '[' {
            break;
        }
        if in_filter && (c == ')' || c == '=' || c == '!' || c == ' ') {
            break;
        }
        key.push(c);
        *pos += 1;
    }
    key
}

fn parse_bracket(chars: &[char], pos: &mut usize) -> Result<Step, String> {
    skip_spaces(chars, pos);
    let step = match chars.get(*pos) {
        Some('*') => {
            *pos += 1;
            Step::Wildcard
        }
        Some('\'') | Some('"') => Step::Key(parse_string(chars, pos)?),
        Some('?') => {
            *pos += 1;
            expect(chars, pos, '(')?;
            skip_spaces(chars, pos);
            expect(chars, pos, '@')?;
            let path = parse_steps(chars, pos, true)?;
            skip_spaces(chars, pos);
            let compare = match chars.get(*pos) {
                Some('=') => {
                    *pos += 1;
                    expect(chars, pos, '=')?;
                    Some((true, parse_literal(chars, pos)?))
                }
                Some('!') => {
                    *pos += 1;
                    expect(chars, pos, '=')?;
                    Some((false, parse_literal(chars, pos)?))
                }
                _ => None,
            };
            skip_spaces(chars, pos);
            expect(chars, pos, ')')?;
            Step::Filter(Filter { path, compare })
        }
        Some(_) => {
            let start = *pos;
            while *pos < chars.len() && chars[*pos] != ']' {
                *pos += 1;
            }
            let text: String = chars[start..*pos].iter().collect();
            let text = text.trim();
            if text.contains(':') || text.contains(',') {
                return Err(format!("slices and unions are not supported: [{text}]"));
            }
            Step::Index(
                text.parse::<i64>()
                    .map_err(|_| format!("invalid array index {text:?}"))?,
            )
        }
        None => return Err("unterminated [".into()),
    };
    skip_spaces(chars, pos);
    expect(chars, pos, ']')?;
    Ok(step)
}

fn parse_literal(chars: &[char], pos: &mut usize) -> Result<Value, String> {
    skip_spaces(chars, pos);
    match chars.get(*pos) {
        Some('\'') | Some('"') => Ok(Value::String(parse_string(chars, pos)?)),
        _ => {
            let start = *pos;
            while *pos < chars.len() && chars[*pos] != ')' && chars[*pos] != ' ' {
                *pos += 1;
            }
            let text: String = chars[start..*pos].iter().collect();
            match text.as_str() {
                "true" => Ok(Value::Bool(true)),
                "false" => Ok(Value::Bool(false)),
                "null" => Ok(Value::Null),
                _ => serde_json::from_str::<serde_json::Number>(&text)
                    .map(Value::Number)
                    .map_err(|_| format!("invalid literal {text:?}")),
            }
        }
    }
}

fn parse_string(chars: &[char], pos: &mut usize) -> Result<String, String> {
    let quote = chars[*pos];
    *pos += 1;
    let mut s = String::new();
    while *pos < chars.len() {
        let c = chars[*pos];
        *pos += 1;
        if c == '\\' && *pos < chars.len() {
            s.push(chars[*pos]);
            *pos += 1;
        } else if c == quote {
            return Ok(s);
        } else {
            s.push(c);
        }
    }
    Err("unterminated string".into())
}

fn skip_spaces(chars: &[char], pos: &mut usize) {
    while *pos < chars.len() && chars[*pos] == ' ' {
        *pos += 1;
    }
}

fn expect(chars: &[char], pos: &mut usize, c: char) -> Result<(), String> {
    if chars.get(*pos) == Some(&c) {
        *pos += 1;
        Ok(())
    } else {
        Err(format!("expected {c:?}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj() -> Value {
        json!({
            "metadata": {"name": "w1", "annotations": {"terrace.dev/locked-by": "alice"}},
            "spec": {"name": "prod", "tags": ["a", "b", "c"]},
            "status": {"conditions": [
                {"type": "Reconciling", "status": "False"},
                {"type": "Ready", "status": "True"}
            ]}
        })
    }

    /// Copies client-go jsonpath: `.a.b` selects nested fields, a missing key selects nothing
    /// (the table convertor sets AllowMissingKeys).
    #[test]
    fn fields_and_missing_keys() {
        let o = obj();
        assert_eq!(find(".spec.name", &o).unwrap(), vec![&json!("prod")]);
        assert!(find(".spec.missing.deeper", &o).unwrap().is_empty());
    }

    /// Copies client-go jsonpath: `\.` escapes a dot inside a key, as in annotation columns.
    #[test]
    fn escaped_dots() {
        let o = obj();
        assert_eq!(
            find(".metadata.annotations.terrace\\.dev/locked-by", &o).unwrap(),
            vec![&json!("alice")]
        );
        assert_eq!(
            find(".metadata.annotations['terrace.dev/locked-by']", &o).unwrap(),
            vec![&json!("alice")]
        );
    }

    /// Copies client-go jsonpath: indexes (negative from the end), wildcards, `{}` and `$`.
    #[test]
    fn indexes_and_wildcards() {
        let o = obj();
        assert_eq!(find(".spec.tags[0]", &o).unwrap(), vec![&json!("a")]);
        assert_eq!(find("{.spec.tags[-1]}", &o).unwrap(), vec![&json!("c")]);
        assert_eq!(find("$.spec.tags[*]", &o).unwrap().len(), 3);
        assert!(find(".spec.tags[7]", &o).unwrap().is_empty());
    }

    /// Copies client-go jsonpath: filters such as the common Ready-condition column.
    #[test]
    fn filters() {
        let o = obj();
        assert_eq!(
            find(".status.conditions[?(@.type==\"Ready\")].status", &o).unwrap(),
            vec![&json!("True")]
        );
        assert_eq!(
            find(".status.conditions[?(@.type != 'Ready')].type", &o).unwrap(),
            vec![&json!("Reconciling")]
        );
    }

    /// Copies client-go jsonpath: malformed expressions are parse errors (the CRD is
    /// rejected with "unrecognized column definition").
    #[test]
    fn parse_errors() {
        assert!(JsonPath::parse(".spec[").is_err());
        assert!(JsonPath::parse(".spec[abc]").is_err());
        assert!(JsonPath::parse("{.spec").is_err());
    }
}
