//! A policy set's parameters: list, show, create, update, delete; a sensitive value
//! goes into a Secret the set owns and is never shown.

use super::*;

pub(super) fn render_parameter(set_id: &str, p: &PolicySetParameter) -> Value {
    let id = p.id_in(set_id);
    json!({
        "id": id,
        "type": "vars",
        "attributes": {
            "key": p.key,
            "value": if p.sensitive { json!("") } else { json!(p.value.clone().unwrap_or_default()) },
            "category": "policy-set",
            "sensitive": p.sensitive,
        },
        "relationships": {
            "configurable": {
                "data": {"id": set_id, "type": "policy-sets"},
                "links": {"related": format!("/api/v2/policy-sets/{set_id}")},
            },
        },
        "links": {"self": format!("/api/v2/policy-sets/{set_id}/parameters/{id}")},
    })
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct ParameterAttributes {
    key: Option<String>,
    value: Option<String>,
    category: Option<String>,
    sensitive: Option<bool>,
}

impl Typed for ParameterAttributes {
    const TYPE: &'static str = "vars";
}

pub(super) fn checked_key(key: &str) -> Result<String, ApiError> {
    let key = key.trim();
    let ok = !key.is_empty()
        && key.len() <= 128
        && key.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ok {
        Ok(key.to_owned())
    } else {
        Err(ApiError::invalid_attribute(
            "key",
            "key must start with a letter or underscore and hold only letters, digits and underscores (at most 128)",
        ))
    }
}

pub(super) fn checked_category(c: Option<&str>) -> Result<(), ApiError> {
    match c {
        None | Some("policy-set") => Ok(()),
        Some(other) => Err(ApiError::invalid_attribute(
            "category",
            format!("category {other:?} is not a policy set parameter's: policy-set"),
        )),
    }
}

pub(super) fn parameter_in<'a>(
    set: &'a PolicySet,
    set_id: &str,
    param: &str,
) -> Result<&'a PolicySetParameter, ApiError> {
    set.spec
        .parameters
        .iter()
        .find(|p| p.id_in(set_id) == param)
        .ok_or_else(|| ApiError::not_found("parameter not found"))
}

pub(super) fn key_taken(
    s: &PolicySetSpec,
    set_id: &str,
    key: &str,
    this: &str,
) -> Result<(), ApiError> {
    if s.parameters
        .iter()
        .any(|p| p.key == key && p.id_in(set_id) != this)
    {
        return Err(ApiError::invalid_attribute(
            "key",
            "Key has already been taken",
        ));
    }
    Ok(())
}

/// Stores a sensitive parameter's value in its Secret, owned by the set.
async fn store_value(
    state: &AppState,
    set: &PolicySet,
    param_id: &str,
    value: &str,
) -> Result<(), ApiError> {
    let name = secret_name(&set.name_any(), param_id);
    write::owned_secret(state, set, &name, PARAMETER_SECRET_KEY, value).await
}

pub(super) fn secret_name(set_object: &str, param_id: &str) -> String {
    format!("{set_object}-{}", param_id.to_ascii_lowercase())
}

pub(super) async fn list_parameters(f: Found<PolicySet>, q: QueryParams) -> Result<Doc, ApiError> {
    let page = q.page()?;
    let id = f.at.id();
    let params: Vec<&PolicySetParameter> = f.at.obj.spec.parameters.iter().collect();
    Ok(list(
        &format!("/api/v2/policy-sets/{id}/parameters"),
        page,
        &params,
        |p| render_parameter(&id, p),
    ))
}

pub(super) async fn show_parameter(
    f: Found<PolicySet>,
    Path((_, param)): Path<(String, String)>,
) -> Result<Doc, ApiError> {
    let id = f.at.id();
    Ok(Doc::ok(render_parameter(
        &id,
        parameter_in(&f.at.obj, &id, &param)?,
    )))
}

/// The parameter as the set keeps it (a sensitive value by reference to its Secret).
pub(super) fn stored(
    id: &str,
    set_object: &str,
    key: String,
    value: Option<String>,
    sensitive: bool,
) -> PolicySetParameter {
    PolicySetParameter {
        id: Some(id.to_owned()),
        key,
        value: if sensitive {
            None
        } else {
            Some(value.unwrap_or_default())
        },
        value_from: sensitive.then(|| SecretKeyRef {
            name: secret_name(set_object, id),
            key: PARAMETER_SECRET_KEY.to_owned(),
        }),
        sensitive,
    }
}

pub(super) async fn create_parameter(
    State(state): State<AppState>,
    f: Found<PolicySet>,
    JsonApi(doc): JsonApi<Document<ParameterAttributes>>,
) -> Result<Doc, ApiError> {
    f.require(&state, "update", SET_NOT_YOURS).await?;
    let a = doc.checked()?.attributes;
    checked_category(a.category.as_deref())?;
    let key = checked_key(
        a.key
            .as_deref()
            .ok_or_else(|| ApiError::invalid_attribute("key", "Key can't be blank"))?,
    )?;
    let set_id = f.at.id();
    let param_id = new_id(IdKind::WorkspaceVariable);
    let sensitive = a.sensitive.unwrap_or(false);
    let param = stored(
        &param_id,
        &f.at.obj.name_any(),
        key,
        a.value.clone(),
        sensitive,
    );
    key_taken(&f.at.obj.spec, &set_id, &param.key, &param_id)?;
    if sensitive {
        let value = a.value.unwrap_or_default();

        store_value(&state, &f.at.obj, &param_id, &value).await?;
    }
    f.at.change_spec(&state, |s| {
        key_taken(s, &set_id, &param.key, &param_id)?;
        s.parameters.push(param.clone());
        Ok(())
    })
    .await?;
    Ok(Doc::created(render_parameter(&set_id, &param)))
}

pub(super) async fn update_parameter(
    State(state): State<AppState>,
    f: Found<PolicySet>,
    Path((_, param)): Path<(String, String)>,
    JsonApi(doc): JsonApi<Document<ParameterAttributes>>,
) -> Result<Doc, ApiError> {
    f.require(&state, "update", SET_NOT_YOURS).await?;
    let a = doc.checked()?.attributes;
    checked_category(a.category.as_deref())?;
    let set_id = f.at.id();
    let current = parameter_in(&f.at.obj, &set_id, &param)?.clone();
    let key = a
        .key
        .as_deref()
        .map(checked_key)
        .transpose()?
        .unwrap_or(current.key.clone());
    let sensitive = match a.sensitive {
        Some(false) if current.sensitive => {
            return Err(ApiError::invalid_attribute(
                "sensitive",
                "a sensitive parameter cannot be made non-sensitive",
            ));
        }
        Some(s) => s,
        None => current.sensitive,
    };
    let value = a.value.clone().or_else(|| current.value.clone());
    let next = stored(&param, &f.at.obj.name_any(), key, value, sensitive);
    key_taken(&f.at.obj.spec, &set_id, &next.key, &param)?;
    // A new sensitive value (or a value made sensitive) goes into the Secret.
    if sensitive && (a.value.is_some() || !current.sensitive) {
        let value = a
            .value
            .clone()
            .or_else(|| current.value.clone())
            .unwrap_or_default();

        store_value(&state, &f.at.obj, &param, &value).await?;
    }
    f.at.change_spec(&state, |s| {
        key_taken(s, &set_id, &next.key, &param)?;
        let slot = s
            .parameters
            .iter_mut()
            .find(|p| p.id_in(&set_id) == param)
            .ok_or_else(|| ApiError::not_found("parameter not found"))?;
        *slot = next.clone();
        Ok(())
    })
    .await?;
    Ok(Doc::ok(render_parameter(&set_id, &next)))
}

pub(super) async fn remove_parameter(
    State(state): State<AppState>,
    f: Found<PolicySet>,
    Path((_, param)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    f.require(&state, "update", SET_NOT_YOURS).await?;
    let set_id = f.at.id();
    let current = parameter_in(&f.at.obj, &set_id, &param)?.clone();
    f.at.change_spec(&state, |s| {
        s.parameters.retain(|p| p.id_in(&set_id) != param);
        Ok(())
    })
    .await?;
    let own = secret_name(&f.at.obj.name_any(), &param);
    write::delete_owned_secret(&state, &f.at.ns, current.value_from.as_ref(), &own).await;
    Ok(no_content())
}
