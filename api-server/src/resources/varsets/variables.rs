//! A variable set's variables: list, show, create, update, delete; a sensitive value
//! goes into a Secret the set owns and is never shown.

use super::*;

pub(super) async fn list_vars(f: Found<VariableSet>, q: QueryParams) -> Result<Doc, ApiError> {
    q.supported_filters(&[])?;
    let id = f.at.id();
    let vars: Vec<&VariableSetVariable> = f.at.obj.spec.variables.iter().collect();
    let page = match (q.get("page[number]"), q.get("page[size]")) {
        (None, None) => terrace_crds::rules::Page {
            number: 1,
            size: u32::try_from(vars.len().max(1)).unwrap_or(u32::MAX),
        },
        _ => q.page()?,
    };
    Ok(list(
        &format!("/api/v2/varsets/{id}/relationships/vars"),
        page,
        &vars,
        |v| render_var(&id, v),
    ))
}

pub(super) fn var_in<'a>(
    set: &'a VariableSet,
    set_id: &str,
    var: &str,
) -> Result<&'a VariableSetVariable, ApiError> {
    set.spec
        .variables
        .iter()
        .find(|v| v.id_in(set_id) == var)
        .ok_or_else(|| ApiError::not_found("variable not found"))
}

pub(super) async fn show_var(
    f: Found<VariableSet>,
    Path((_, var)): Path<(String, String)>,
) -> Result<Doc, ApiError> {
    let id = f.at.id();
    Ok(Doc::ok(render_var(&id, var_in(&f.at.obj, &id, &var)?)))
}

/// Name of the Secret of sensitive variable `var_id` of set object `set_object`.
pub(super) fn secret_name(set_object: &str, var_id: &str) -> String {
    format!("{set_object}-{}", var_id.to_ascii_lowercase())
}

/// The variable `spec` leaves, as the set keeps it (a sensitive value by reference).
pub(super) fn stored(
    id: &str,
    set_object: &str,
    spec: WorkspaceVariableSpec,
) -> VariableSetVariable {
    VariableSetVariable {
        id: Some(id.to_owned()),
        value_from: spec.sensitive.then(|| SecretKeyRef {
            name: secret_name(set_object, id),
            key: VARIABLE_SECRET_KEY.to_owned(),
        }),
        key: spec.key,
        value: if spec.sensitive {
            String::new()
        } else {
            spec.value
        },
        description: spec.description,
        category: spec.category,
        hcl: spec.hcl,
        sensitive: spec.sensitive,
        // Every write is a new version.
        revision: Some(crate::capability::random_token()),
    }
}

/// 422 when another variable of set `s` (ID `set_id`) has `v`'s key in its category.
pub(super) fn key_taken(
    s: &VariableSetSpec,
    set_id: &str,
    v: &VariableSetVariable,
) -> Result<(), ApiError> {
    let taken = s
        .variables
        .iter()
        .any(|o| o.key == v.key && o.category == v.category && o.id_in(set_id) != v.id_in(set_id));
    if taken {
        return Err(ApiError::Invalid(vec![FieldError::attribute(
            "key",
            "Key has already been taken",
        )]));
    }
    Ok(())
}

/// Writes sensitive `value` of variable `var_id` into its Secret, owned by the set.
pub(super) async fn store_value(
    state: &AppState,
    set: &VariableSet,
    var_id: &str,
    value: &str,
) -> Result<(), ApiError> {
    let name = secret_name(&set.name_any(), var_id);
    write::owned_secret(state, set, &name, VARIABLE_SECRET_KEY, value).await
}

pub(super) async fn create_var(
    State(state): State<AppState>,
    f: Found<VariableSet>,
    JsonApi(doc): JsonApi<Document<VarAttributes>>,
) -> Result<Doc, ApiError> {
    may_change(&state, &f, "update").await?;
    let mut errs = Vec::new();
    let input = doc.checked()?.attributes.parse(&mut errs);
    if input.key.is_none() && !errs.iter().any(|e| e.pointer == ptr("key")) {
        errs.push(FieldError::attribute("key", "Key can't be blank"));
    }
    let spec = checked_spec(&input, None, "", &mut errs);
    if !errs.is_empty() {
        return Err(ApiError::Invalid(errs));
    }
    let set_id = f.at.id();
    let var_id = new_id(IdKind::WorkspaceVariable);
    let object = f.at.obj.name_any();
    let var = stored(&var_id, &object, spec);
    key_taken(&f.at.obj.spec, &set_id, &var)?;
    if var.sensitive {
        let value = input.value.clone().unwrap_or_default();
        store_value(&state, &f.at.obj, &var_id, &value).await?;
    }
    f.at.change_spec(&state, |s| {
        key_taken(s, &set_id, &var)?;
        s.variables.push(var.clone());
        Ok(())
    })
    .await?;
    Ok(Doc::created(render_var(&set_id, &var)))
}

pub(super) async fn update_var(
    State(state): State<AppState>,
    f: Found<VariableSet>,
    Path((_, var)): Path<(String, String)>,
    JsonApi(doc): JsonApi<Document<VarAttributes>>,
) -> Result<Doc, ApiError> {
    may_change(&state, &f, "update").await?;
    let set_id = f.at.id();
    let current = var_in(&f.at.obj, &set_id, &var)?.clone();
    let mut errs = Vec::new();
    let input = doc.checked()?.attributes.parse(&mut errs);
    let cur_spec = as_spec(&current);
    let spec = checked_spec(&input, Some(&cur_spec), "", &mut errs);
    if !errs.is_empty() {
        return Err(ApiError::Invalid(errs));
    }
    let object = f.at.obj.name_any();
    let next = stored(&var, &object, spec);
    key_taken(&f.at.obj.spec, &set_id, &next)?;
    if let Some(value) = new_secret_value(
        next.sensitive,
        input.value.as_deref(),
        current.sensitive,
        &current.value,
    ) {
        store_value(&state, &f.at.obj, &var, &value).await?;
    }
    f.at.change_spec(&state, |s| {
        key_taken(s, &set_id, &next)?;
        let slot = s
            .variables
            .iter_mut()
            .find(|v| v.id_in(&set_id) == var)
            .ok_or_else(|| ApiError::not_found("variable not found"))?;
        *slot = next.clone();
        Ok(())
    })
    .await?;
    Ok(Doc::ok(render_var(&set_id, &next)))
}

pub(super) async fn remove_var(
    State(state): State<AppState>,
    f: Found<VariableSet>,
    Path((_, var)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    may_change(&state, &f, "update").await?;
    let set_id = f.at.id();
    let current = var_in(&f.at.obj, &set_id, &var)?.clone();
    f.at.change_spec(&state, |s| {
        s.variables.retain(|v| v.id_in(&set_id) != var);
        Ok(())
    })
    .await?;
    let own = secret_name(&f.at.obj.name_any(), &var);
    write::delete_owned_secret(&state, &f.at.ns, current.value_from.as_ref(), &own).await;
    Ok(no_content())
}

// ---- the sets applied to a workspace or project ----
