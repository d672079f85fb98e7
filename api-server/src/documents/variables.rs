//! The request shape of a variable (JSON:API type `vars`), which workspace variables and
//! a module's test variables both accept, and the Secret of a sensitive value.

use serde::Deserialize;
use serde_json::{Value, json};
use terrace_crds::rules::{
    VariableCategory, validate_variable_description, validate_workspace_variable_hcl,
    validate_workspace_variable_key,
};
use terrace_crds::{VariableSetVariable, WorkspaceVariableSpec};

use crate::body::{Attr, Typed};
use crate::error::FieldError;

/// Name of the Secret holding a sensitive variable's value.
pub fn secret_name(var_object_name: &str) -> String {
    format!("{var_object_name}-value")
}

/// The JSON pointer of attribute `attr` of a request.
pub fn ptr(attr: &str) -> String {
    format!("/data/attributes/{attr}")
}

/// The attributes of a variable request, as sent.
#[derive(Debug, Default, Deserialize)]
pub struct VarAttributes {
    #[serde(default)]
    key: Attr<String>,
    #[serde(default)]
    value: Attr<String>,
    #[serde(default)]
    description: Attr<String>,
    #[serde(default)]
    category: Attr<String>,
    #[serde(default)]
    hcl: Attr<bool>,
    #[serde(default)]
    sensitive: Attr<bool>,
}

impl Typed for VarAttributes {
    const TYPE: &'static str = "vars";
}

/// The attributes of a request, typed; `None` = not given.
#[derive(Default)]
pub struct VarInput {
    pub key: Option<String>,
    pub value: Option<String>,
    pub description: Option<String>,
    pub category: Option<String>,
    pub hcl: Option<bool>,
    pub sensitive: Option<bool>,
}

impl VarAttributes {
    /// The attributes typed; an attribute of the wrong type is one error in `errs`.
    pub fn parse(self, errs: &mut Vec<FieldError>) -> VarInput {
        VarInput {
            key: self.key.take(&ptr("key"), "a string", errs),
            value: self.value.take(&ptr("value"), "a string", errs),
            description: self.description.take(&ptr("description"), "a string", errs),
            category: self.category.take(&ptr("category"), "a string", errs),
            hcl: self.hcl.take(&ptr("hcl"), "a boolean", errs),
            sensitive: self.sensitive.take(&ptr("sensitive"), "a boolean", errs),
        }
    }
}

/// The variable a create or update leaves, checked against the rules of the CRD: every
/// broken rule is one error in `errs`. `current` is the variable updated (None: create).
pub fn checked_spec(
    input: &VarInput,
    current: Option<&WorkspaceVariableSpec>,
    workspace: &str,
    errs: &mut Vec<FieldError>,
) -> WorkspaceVariableSpec {
    let given = |attr: &str, errs: &[FieldError]| errs.iter().any(|e| e.pointer == ptr(attr));
    let cur = current.cloned().unwrap_or_default();
    let category_text = input
        .category
        .clone()
        .or_else(|| current.map(|c| c.category.clone()))
        .unwrap_or_default();
    let category = if given("category", errs) {
        None
    } else {
        match VariableCategory::parse(&category_text) {
            Ok(c) => Some(c),
            Err(v) => {
                errs.push(v.into());
                None
            }
        }
    };
    let key = input.key.clone().unwrap_or(cur.key.clone());
    if let Some(c) = category
        && !given("key", errs)
        && let Err(v) = validate_workspace_variable_key(&key, c)
    {
        errs.push(v.into());
    }
    let hcl = input.hcl.unwrap_or(cur.hcl);
    if let Some(c) = category
        && !given("hcl", errs)
        && let Err(v) = validate_workspace_variable_hcl(hcl, c)
    {
        errs.push(v.into());
    }
    if let Some(d) = &input.description
        && let Err(v) = validate_variable_description(d)
    {
        errs.push(v.into());
    }
    if cur.sensitive && input.sensitive == Some(false) {
        errs.push(FieldError::attribute(
            "sensitive",
            "Sensitive cannot be changed from true to false; delete and recreate the variable",
        ));
    }
    let sensitive = cur.sensitive || input.sensitive == Some(true);
    WorkspaceVariableSpec {
        workspace: workspace.to_owned(),
        key,
        value: if sensitive {
            String::new()
        } else {
            input.value.clone().unwrap_or(cur.value)
        },
        value_from: None,
        description: input.description.clone().or(cur.description),
        category: category_text,
        hcl,
        sensitive,
    }
}

/// The JSON:API `data` of a variable of set `set_id`; a sensitive value reads `null`.
pub fn set_var(set_id: &str, v: &VariableSetVariable) -> Value {
    let id = v.id_in(set_id);
    json!({
        "id": id,
        "type": "vars",
        "attributes": {
            "key": v.key,
            "value": if v.sensitive { Value::Null } else { json!(v.value) },
            "description": v.description,
            "category": v.category,
            "hcl": v.hcl,
            "sensitive": v.sensitive,
            // A digest of the variable and of the revision token each create and update
            // writes, so every update is a new version (as TFE's).
            "version-id": set_var_spec(v).version_id(v.revision.as_deref()),
        },
        "relationships": {"varset": {"data": {"id": set_id, "type": "varsets"}}},
        "links": {"self": format!("/api/v2/varsets/{set_id}/relationships/vars/{id}")},
    })
}

/// The workspace-variable spec a set variable stands for (for the shared rules).
pub fn set_var_spec(v: &VariableSetVariable) -> WorkspaceVariableSpec {
    WorkspaceVariableSpec {
        workspace: String::new(),
        key: v.key.clone(),
        value: v.value.clone(),
        value_from: v.value_from.clone(),
        description: v.description.clone(),
        category: v.category.clone(),
        hcl: v.hcl,
        sensitive: v.sensitive,
    }
}
