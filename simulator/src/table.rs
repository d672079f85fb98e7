//! `meta.k8s.io/v1` Table rendering of list and get responses (`Accept: ...;as=Table`), as
//! kube-apiserver's CRD table convertor produces them, so `kubectl get` prints a resource's
//! printer columns.
//!
//! The REST layer hands over the resource's [`ResourceInfo`] (its printer columns), the full
//! objects and the list metadata; this module evaluates each column's JSONPath against each
//! object and renders the cells by column type: `date` columns become ages such as `5m3s`
//! (apimachinery's `duration.HumanDuration`), `integer` and `number` columns JSON numbers,
//! `string` columns the printed value (compact JSON for maps and lists). A resource without
//! printer columns gets the `Age` column real CRDs get by default.

use crate::jsonpath::JsonPath;
use crate::resource::{PrinterColumn, ResourceInfo};
use serde_json::{Map, Value, json};

/// What `rows[].object` carries, from the `includeObject` query parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum IncludeObject {
    /// `includeObject=None`: `"object": null`.
    None,
    /// `includeObject=Metadata` (the default): a `PartialObjectMetadata`.
    #[default]
    Metadata,
    /// `includeObject=Object`: the whole object.
    Object,
}

impl IncludeObject {
    /// Parses the `includeObject` query parameter value (`None`, `Metadata`, `Object`; empty
    /// means `Metadata`). Any other value is an error, as in kube-apiserver's
    /// `TableOptions` validation.
    pub fn parse(value: &str) -> Result<IncludeObject, String> {
        match value {
            "None" => Ok(IncludeObject::None),
            "" | "Metadata" => Ok(IncludeObject::Metadata),
            "Object" => Ok(IncludeObject::Object),
            other => Err(format!(
                "includeObject: Unsupported value: \"{other}\": supported values: \"Metadata\", \"None\", \"Object\""
            )),
        }
    }
}

/// Description kube-apiserver gives the `Name` column (ObjectMeta.name's).
const NAME_DESCRIPTION: &str = "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";

/// Description of the default `Age` column (ObjectMeta.creationTimestamp's).
const CREATION_TIMESTAMP_DESCRIPTION: &str = "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";

/// The printer columns a resource is rendered with: its own, or `Age` when it has none
/// (apiextensions' `GetColumnsForVersion`).
pub fn effective_columns(info: &ResourceInfo) -> Vec<PrinterColumn> {
    if info.printer_columns.is_empty() {
        vec![PrinterColumn {
            name: "Age".into(),
            type_: "date".into(),
            format: String::new(),
            description: CREATION_TIMESTAMP_DESCRIPTION.into(),
            priority: 0,
            json_path: ".metadata.creationTimestamp".into(),
        }]
    } else {
        info.printer_columns.clone()
    }
}

/// A meta.k8s.io/v1 Table for `items` (full objects) with the resource's printer columns
/// (Name first; for resources without printer columns: Name, Age), `list_meta` copied to
/// metadata.
pub fn to_table(
    info: &ResourceInfo,
    items: &[Value],
    list_meta: Value,
    include: IncludeObject,
    now: jiff::Timestamp,
) -> Value {
    let columns = effective_columns(info);
    let mut definitions = vec![json!({
        "name": "Name",
        "type": "string",
        "format": "name",
        "description": NAME_DESCRIPTION,
        "priority": 0,
    })];
    let mut paths = Vec::with_capacity(columns.len());
    for c in &columns {
        let description = if c.description.is_empty() {
            format!(
                "Custom resource definition column (in JSONPath format): {}",
                c.json_path
            )
        } else {
            c.description.clone()
        };
        definitions.push(json!({
            "name": c.name,
            "type": c.type_,
            "format": c.format,
            "description": description,
            "priority": c.priority,
        }));
        // A path that does not parse renders null cells; the CRD registration is where real
        // kube-apiserver rejects it.
        paths.push(JsonPath::parse(&c.json_path).ok());
    }

    let rows: Vec<Value> = items
        .iter()
        .map(|item| {
            let mut cells = Vec::with_capacity(columns.len() + 1);
            cells.push(
                item.pointer("/metadata/name")
                    .cloned()
                    .unwrap_or_else(|| Value::String(String::new())),
            );
            for (c, path) in columns.iter().zip(&paths) {
                let value = path.as_ref().and_then(|p| p.find(item).into_iter().next());
                cells.push(match value {
                    None => Value::Null,
                    Some(v) => cell_for_value(&c.type_, v, now),
                });
            }
            let object = match include {
                IncludeObject::None => Value::Null,
                IncludeObject::Object => item.clone(),
                IncludeObject::Metadata => json!({
                    "kind": "PartialObjectMetadata",
                    "apiVersion": "meta.k8s.io/v1",
                    "metadata": item.get("metadata").cloned().unwrap_or_else(|| json!({})),
                }),
            };
            json!({"cells": cells, "object": object})
        })
        .collect();

    let metadata = match list_meta {
        Value::Object(m) => Value::Object(m),
        _ => Value::Object(Map::new()),
    };
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": metadata,
        "columnDefinitions": definitions,
        "rows": rows,
    })
}

/// A cell as `cellForJSONValue` (and, for strings, jsonpath's `PrintResults`) renders it.
fn cell_for_value(column_type: &str, value: &Value, now: jiff::Timestamp) -> Value {
    match column_type {
        "string" => match value {
            Value::Null => Value::Null,
            Value::String(s) => Value::String(s.clone()),
            Value::Bool(b) => Value::String(b.to_string()),
            Value::Number(n) => Value::String(match n.as_i64() {
                Some(i) => i.to_string(),
                None => go_float(n.as_f64().unwrap_or(0.0)),
            }),
            other => Value::String(serde_json::to_string(other).unwrap_or_default()),
        },
        "integer" => match value {
            Value::Number(n) => match n.as_i64() {
                Some(i) => json!(i),
                None => json!(n.as_f64().unwrap_or(0.0) as i64),
            },
            _ => Value::Null,
        },
        "number" => match value {
            Value::Number(n) => json_float(n.as_f64().unwrap_or(0.0)),
            _ => Value::Null,
        },
        "boolean" => match value {
            Value::Bool(b) => Value::Bool(*b),
            _ => Value::Null,
        },
        "date" => match value {
            Value::String(s) => Value::String(match s.parse::<jiff::Timestamp>() {
                Ok(t) => human_duration(now.duration_since(t)),
                Err(_) if s.is_empty() => "<unknown>".into(),
                Err(_) => "<invalid>".into(),
            }),
            _ => Value::Null,
        },
        _ => Value::Null,
    }
}

/// A float as Go's encoding/json writes it: integral values without a fraction.
fn json_float(f: f64) -> Value {
    if f.fract() == 0.0 && f.abs() < 1e15 {
        json!(f as i64)
    } else {
        json!(f)
    }
}

/// Formats a float as Go's `%v` does (`strconv.FormatFloat(f, 'g', -1, 64)`): the shortest
/// digits that round-trip, in exponent form (`1e+06`) when the decimal exponent is below -4
/// or at least 6 (strconv uses precision 6 for that decision when printing the shortest
/// representation).
pub(crate) fn go_float(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        };
    }
    if f == 0.0 {
        return "0".into();
    }
    // Shortest round-trip digits in scientific form, e.g. "1.234567e6".
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if !(-4..6).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.abs())
    } else {
        format!("{f}")
    }
}

/// `{big}{big_unit}{small}{small_unit}` (`3m5s`), without the small part when it is 0.
fn two_units(big: i64, big_unit: &str, small: i64, small_unit: &str) -> String {
    if small == 0 {
        format!("{big}{big_unit}")
    } else {
        format!("{big}{big_unit}{small}{small_unit}")
    }
}

/// apimachinery's `duration.HumanDuration`: a concise age such as `45s`, `3m5s`, `5h2m`,
/// `3d4h`, `2y10d`.
pub fn human_duration(d: jiff::SignedDuration) -> String {
    let seconds = d.as_secs();
    if seconds < -1 {
        return "<invalid>".into();
    } else if seconds < 0 {
        return "0s".into();
    } else if seconds < 60 * 2 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        return two_units(minutes, "m", seconds % 60, "s");
    } else if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = seconds / 3600;
    if hours < 8 {
        return two_units(hours, "h", minutes % 60, "m");
    } else if hours < 48 {
        return format!("{hours}h");
    } else if hours < 24 * 8 {
        return two_units(hours / 24, "d", hours % 24, "h");
    } else if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    } else if hours < 24 * 365 * 8 {
        return two_units(hours / 24 / 365, "y", (hours / 24) % 365, "d");
    }
    format!("{}y", hours / 24 / 365)
}

#[cfg(test)]
mod tests {
    use super::*;
    use jiff::SignedDuration;

    fn info(columns: Vec<PrinterColumn>) -> ResourceInfo {
        ResourceInfo {
            group: "terrace.dev".into(),
            version: "v1alpha1".into(),
            kind: "Workspace".into(),
            list_kind: "WorkspaceList".into(),
            plural: "workspaces".into(),
            singular: "workspace".into(),
            namespaced: true,
            short_names: vec![],
            categories: vec![],
            schema: None,
            printer_columns: columns,
            status_subresource: true,
            custom: true,
        }
    }

    fn col(name: &str, type_: &str, path: &str) -> PrinterColumn {
        PrinterColumn {
            name: name.into(),
            type_: type_.into(),
            format: String::new(),
            description: String::new(),
            priority: 0,
            json_path: path.into(),
        }
    }

    fn now() -> jiff::Timestamp {
        "2025-01-10T12:00:00Z".parse().unwrap()
    }

    /// Copies apimachinery duration.HumanDuration (its unit test table).
    #[test]
    fn human_durations() {
        let cases = [
            (-2, "<invalid>"),
            (-1, "0s"),
            (0, "0s"),
            (5, "5s"),
            (119, "119s"),
            (120, "2m"),
            (125, "2m5s"),
            (600, "10m"),
            (3 * 3600 - 1, "179m"),
            (3 * 3600, "3h"),
            (3 * 3600 + 120, "3h2m"),
            (8 * 3600, "8h"),
            (47 * 3600 + 59 * 60, "47h"),
            (48 * 3600, "2d"),
            (48 * 3600 + 3600, "2d1h"),
            (8 * 86400, "8d"),
            (2 * 365 * 86400, "2y"),
            (2 * 365 * 86400 + 86400, "2y1d"),
            (8 * 365 * 86400, "8y"),
        ];
        for (secs, want) in cases {
            assert_eq!(
                human_duration(SignedDuration::from_secs(secs)),
                want,
                "{secs}s"
            );
        }
    }

    /// Copies Go's fmt `%v` for float64, which jsonpath's PrintResults uses for numbers in
    /// string columns.
    #[test]
    fn go_float_format() {
        assert_eq!(go_float(1.5), "1.5");
        assert_eq!(go_float(2.0), "2");
        assert_eq!(go_float(1e21), "1e+21");
        assert_eq!(go_float(0.00001), "1e-05");
        assert_eq!(go_float(123456.0), "123456");
        assert_eq!(go_float(1e6), "1e+06");
        assert_eq!(go_float(123456789.0), "1.23456789e+08");
        assert_eq!(go_float(0.0001), "0.0001");
    }

    /// Copies the CRD table convertor: Name column (format "name") first, then the printer
    /// columns with their type/format/priority, a default description naming the JSONPath,
    /// date cells as ages, integers as numbers, missing values as null, list metadata copied,
    /// and a PartialObjectMetadata per row by default.
    #[test]
    fn table_with_printer_columns() {
        let mut cols = vec![
            col("TFE Name", "string", ".spec.name"),
            col(
                "Locked",
                "string",
                ".metadata.annotations.terrace\\.dev/locked-by",
            ),
            col("Resources", "integer", ".status.resourceCount"),
            col("Age", "date", ".metadata.creationTimestamp"),
        ];
        cols[2].priority = 1;
        cols[0].description = "The workspace name".into();
        let items = vec![serde_json::json!({
            "apiVersion": "terrace.dev/v1alpha1",
            "kind": "Workspace",
            "metadata": {"name": "ws-1", "namespace": "acme",
                         "creationTimestamp": "2025-01-10T11:55:00Z"},
            "spec": {"name": "prod"},
            "status": {"resourceCount": 3}
        })];
        let t = to_table(
            &info(cols),
            &items,
            json!({"resourceVersion": "42"}),
            IncludeObject::Metadata,
            now(),
        );
        assert_eq!(t["kind"], "Table");
        assert_eq!(t["apiVersion"], "meta.k8s.io/v1");
        assert_eq!(t["metadata"], json!({"resourceVersion": "42"}));
        let defs = t["columnDefinitions"].as_array().unwrap();
        assert_eq!(defs.len(), 5);
        assert_eq!(defs[0]["name"], "Name");
        assert_eq!(defs[0]["format"], "name");
        assert_eq!(defs[1]["description"], "The workspace name");
        assert_eq!(
            defs[2]["description"],
            "Custom resource definition column (in JSONPath format): .metadata.annotations.terrace\\.dev/locked-by"
        );
        assert_eq!(defs[3]["priority"], 1);
        assert_eq!(defs[4]["type"], "date");
        let row = &t["rows"][0];
        assert_eq!(row["cells"], json!(["ws-1", "prod", null, 3, "5m"]));
        assert_eq!(row["object"]["kind"], "PartialObjectMetadata");
        assert_eq!(row["object"]["apiVersion"], "meta.k8s.io/v1");
        assert_eq!(row["object"]["metadata"]["name"], "ws-1");
        assert!(row["object"].get("spec").is_none());
    }

    /// Copies apiextensions GetColumnsForVersion: a CRD version without printer columns
    /// gets Name and Age; `includeObject=Object` embeds the object, `None` a null.
    #[test]
    fn default_columns_and_include_object() {
        let items =
            vec![json!({"metadata": {"name": "a", "creationTimestamp": "2025-01-08T10:00:00Z"}})];
        let t = to_table(
            &info(vec![]),
            &items,
            json!({}),
            IncludeObject::Object,
            now(),
        );
        let defs = t["columnDefinitions"].as_array().unwrap();
        assert_eq!(defs.len(), 2);
        assert_eq!(defs[1]["name"], "Age");
        assert_eq!(defs[1]["type"], "date");
        assert_eq!(t["rows"][0]["cells"], json!(["a", "2d2h"]));
        assert_eq!(t["rows"][0]["object"], items[0]);
        let t = to_table(&info(vec![]), &items, json!({}), IncludeObject::None, now());
        assert_eq!(t["rows"][0]["object"], Value::Null);
        assert_eq!(
            to_table(&info(vec![]), &[], json!({}), IncludeObject::None, now())["rows"],
            json!([])
        );
    }

    /// Copies cellForJSONValue: number columns are floats, booleans stay booleans, a value
    /// of the wrong type is null, an unparsable date is "<invalid>", and string columns print
    /// non-strings (numbers plainly, maps as JSON).
    #[test]
    fn cell_types() {
        assert_eq!(cell_for_value("number", &json!(2), now()), json!(2));
        assert_eq!(cell_for_value("number", &json!(2.5), now()), json!(2.5));
        assert_eq!(cell_for_value("integer", &json!(2.9), now()), json!(2));
        assert_eq!(cell_for_value("integer", &json!("x"), now()), Value::Null);
        assert_eq!(cell_for_value("boolean", &json!(true), now()), json!(true));
        assert_eq!(
            cell_for_value("date", &json!("yesterday"), now()),
            json!("<invalid>")
        );
        assert_eq!(cell_for_value("string", &json!(7), now()), json!("7"));
        assert_eq!(
            cell_for_value("string", &json!({"b": 1, "a": [true]}), now()),
            json!("{\"a\":[true],\"b\":1}")
        );
    }

    /// Copies TableOptions validation of includeObject.
    #[test]
    fn include_object_parse() {
        assert_eq!(IncludeObject::parse("").unwrap(), IncludeObject::Metadata);
        assert_eq!(
            IncludeObject::parse("Object").unwrap(),
            IncludeObject::Object
        );
        assert!(IncludeObject::parse("All").is_err());
    }
}
