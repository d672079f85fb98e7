//! Descriptions of the resource types the simulator serves: the built-in kinds and the
//! kinds registered by CustomResourceDefinition objects. Shared by discovery, OpenAPI,
//! Table output and the REST handlers.

use serde_json::{Value, json};

/// A printer column, as in a CRD's `additionalPrinterColumns`.
#[derive(Clone, Debug, PartialEq)]
pub struct PrinterColumn {
    pub name: String,
    /// OpenAPI type: `string`, `integer`, `number`, `boolean` or `date`.
    pub type_: String,
    pub format: String,
    pub description: String,
    pub priority: i32,
    /// A simple JSONPath such as `.spec.name` or `.metadata.annotations.terrace\.dev/locked-by`.
    pub json_path: String,
}

/// One served resource (one group/version/plural).
#[derive(Clone, Debug)]
pub struct ResourceInfo {
    pub group: String,
    pub version: String,
    pub kind: String,
    pub list_kind: String,
    pub plural: String,
    pub singular: String,
    pub namespaced: bool,
    pub short_names: Vec<String>,
    pub categories: Vec<String>,
    /// `openAPIV3Schema` of the version for custom resources; `None` for built-in kinds
    /// (which the simulator stores without schema validation).
    pub schema: Option<Value>,
    pub printer_columns: Vec<PrinterColumn>,
    pub status_subresource: bool,
    /// Whether this came from a CustomResourceDefinition.
    pub custom: bool,
}

impl ResourceInfo {
    /// `v1` for the core group, else `group/version`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

/// The store key of `info`'s resource: (group, plural).
pub fn res_key(info: &ResourceInfo) -> (String, String) {
    (info.group.clone(), info.plural.clone())
}

/// The object as the requested version serves it (one stored copy, apiVersion rewritten).
pub fn in_version(obj: &Value, info: &ResourceInfo) -> Value {
    let mut o = obj.clone();
    if let Some(m) = o.as_object_mut() {
        m.insert("apiVersion".into(), json!(info.api_version()));
        m.insert("kind".into(), json!(info.kind));
    }
    o
}
