//! The request shape of a variable (JSON:API type `vars`), which workspace variables and
//! a module's test variables both accept, and the Secret of a sensitive value.

use serde::Deserialize;

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
