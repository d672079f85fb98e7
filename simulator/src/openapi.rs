//! OpenAPI documents built from the resources the simulator serves, so kubectl works
//! against it without extra flags: `kubectl explain` reads field descriptions from the v3
//! documents, `kubectl apply` decides from them whether the server supports server-side
//! field validation (a `fieldValidation` query parameter on the kind's PATCH operation) and
//! which patch type to send, and other clients read the swagger 2.0 document.
//!
//! - `GET /openapi/v3` → [`v3_index`]: one `serverRelativeURL` per served group version,
//!   with a `hash` of that document so clients cache it.
//! - `GET /openapi/v3/api/v1`, `/openapi/v3/apis/{group}/{version}` →
//!   [`v3_group_version`]: paths with operations per resource, and `components.schemas`
//!   with one schema per kind (named like kube-apiserver's, e.g.
//!   `dev.terrace.v1alpha1.Workspace`) carrying `x-kubernetes-group-version-kind`, plus the
//!   list kind and ObjectMeta/ListMeta with their descriptions.
//! - `GET /openapi/v2` → [`v2_document`]: the same in swagger 2.0 form, as JSON or, for
//!   the protobuf media type client-go asks for, as gnostic's `openapi.v2.Document`
//!   ([`v2proto`]).
//!
//! Each answers in the media types kube-openapi's handlers offer, chosen from the Accept
//! header ([`negotiate`]); none acceptable is 406.
//!
//! Custom resources get their CRD schema with `apiVersion`, `kind` and `metadata` merged
//! in. Built-in kinds (which the simulator stores without schema) get a permissive schema
//! (`x-kubernetes-preserve-unknown-fields`) so no real manifest is rejected; their PATCH
//! operations do not list `application/strategic-merge-patch+json`, so kubectl computes
//! strategic merge patches from its compiled-in types (whose patch-merge keys a permissive
//! schema would lack) exactly as it would from a real server's full schemas.

use crate::resource::ResourceInfo;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ListMeta, ObjectMeta};
use k8s_openapi::schemars::generate::SchemaSettings;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::sync::OnceLock;

const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";
const LIST_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta";
const STATUS: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Status";

const API_VERSION_DESCRIPTION: &str = "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources";
const KIND_DESCRIPTION: &str = "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds";
const METADATA_DESCRIPTION: &str = "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";
const LIST_METADATA_DESCRIPTION: &str = "Standard list metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds";

/// Which document flavour is being built: references and operation shapes differ.
#[derive(Clone, Copy, PartialEq)]
enum Flavor {
    V2,
    V3,
}

impl Flavor {
    fn reference(self, name: &str) -> Value {
        match self {
            Flavor::V2 => json!({"$ref": format!("#/definitions/{name}")}),
            Flavor::V3 => json!({"$ref": format!("#/components/schemas/{name}")}),
        }
    }
}

/// ObjectMeta, ListMeta, Status and what they reference, from k8s-openapi's schemas (the
/// Kubernetes API's own descriptions), with `#/components/schemas/` references.
fn meta_definitions() -> &'static Map<String, Value> {
    static DEFS: OnceLock<Map<String, Value>> = OnceLock::new();
    DEFS.get_or_init(|| {
        let mut generator = SchemaSettings::openapi3()
            .with(|s| s.transforms.clear())
            .into_generator();
        generator.subschema_for::<ObjectMeta>();
        generator.subschema_for::<ListMeta>();
        generator.subschema_for::<k8s_openapi::apimachinery::pkg::apis::meta::v1::Status>();
        generator.take_definitions(false)
    })
}

/// Rewrites `#/components/schemas/` references to `#/definitions/` for swagger 2.0.
fn to_v2_refs(v: &mut Value) {
    match v {
        Value::Object(m) => {
            if let Some(Value::String(r)) = m.get_mut("$ref")
                && let Some(rest) = r.strip_prefix("#/components/schemas/")
            {
                *r = format!("#/definitions/{rest}");
            }
            for x in m.values_mut() {
                to_v2_refs(x);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(to_v2_refs),
        _ => {}
    }
}

/// The definition name kube-apiserver publishes a kind under.
pub fn definition_name(info: &ResourceInfo, kind: &str) -> String {
    let prefix = if info.custom {
        let mut labels: Vec<&str> = info.group.split('.').collect();
        labels.reverse();
        labels.join(".")
    } else if info.group.is_empty() {
        "io.k8s.api.core".to_string()
    } else if info.group == "apiextensions.k8s.io" {
        "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions".to_string()
    } else {
        format!(
            "io.k8s.api.{}",
            info.group.split('.').next().unwrap_or(&info.group)
        )
    };
    format!("{prefix}.{}.{kind}", info.version)
}

fn gvk(info: &ResourceInfo, kind: &str) -> Value {
    json!({"group": info.group, "version": info.version, "kind": kind})
}

fn metadata_property(flavor: Flavor, list: bool) -> Value {
    let (name, description) = if list {
        (LIST_META, LIST_METADATA_DESCRIPTION)
    } else {
        (OBJECT_META, METADATA_DESCRIPTION)
    };
    match flavor {
        Flavor::V3 => {
            json!({"allOf": [flavor.reference(name)], "default": {}, "description": description})
        }
        Flavor::V2 => {
            let mut r = flavor.reference(name);
            r["description"] = json!(description);
            r
        }
    }
}

/// Removes what swagger 2.0 cannot express, as kube-apiserver's `ToStructuralOpenAPIV2`
/// does for CRD schemas in the v2 document: the combinators, CEL rules and `nullable`;
/// and a nullable or `x-kubernetes-preserve-unknown-fields` node loses `type`, `items`
/// and `properties`, since kubectl's v2 validation would reject values or fields they
/// do not list.
fn strip_for_v2(v: &mut Value) {
    match v {
        Value::Object(m) => {
            let open = |k: &str| m.get(k).and_then(Value::as_bool) == Some(true);
            if open("nullable") || open("x-kubernetes-preserve-unknown-fields") {
                for k in ["type", "items", "properties"] {
                    m.remove(k);
                }
            }
            for k in [
                "nullable",
                "anyOf",
                "oneOf",
                "allOf",
                "not",
                "x-kubernetes-validations",
            ] {
                m.remove(k);
            }
            m.values_mut().for_each(strip_for_v2);
        }
        Value::Array(a) => a.iter_mut().for_each(strip_for_v2),
        _ => {}
    }
}

/// The kind's schema: the CRD schema (or a permissive one for built-in kinds) with
/// apiVersion, kind and metadata merged in.
///
/// In the v2 document a schema that keeps unknown fields at its root (every built-in
/// kind's) is just `type: object`, without even `apiVersion`, `kind` and `metadata`,
/// as kube-apiserver publishes such CRDs there: kubectl's v2 validation takes listed
/// properties for all there may be.
fn kind_schema(info: &ResourceInfo, flavor: Flavor) -> Value {
    let mut schema = match &info.schema {
        Some(s) if s.is_object() => s.clone(),
        _ => json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
    };
    if flavor == Flavor::V2
        && schema.get("x-kubernetes-preserve-unknown-fields") == Some(&json!(true))
    {
        return json!({
            "type": "object",
            "x-kubernetes-group-version-kind": [gvk(info, &info.kind)],
        });
    }
    if flavor == Flavor::V2 {
        strip_for_v2(&mut schema);
    }
    let Some(m) = schema.as_object_mut() else {
        return schema;
    };
    if !m.contains_key("type") {
        m.insert("type".into(), json!("object"));
    }
    let props = m.entry("properties").or_insert_with(|| json!({}));
    if let Some(p) = props.as_object_mut() {
        p.insert(
            "apiVersion".into(),
            json!({"type": "string", "description": API_VERSION_DESCRIPTION}),
        );
        p.insert(
            "kind".into(),
            json!({"type": "string", "description": KIND_DESCRIPTION}),
        );
        p.insert("metadata".into(), metadata_property(flavor, false));
    }
    m.insert(
        "x-kubernetes-group-version-kind".into(),
        json!([gvk(info, &info.kind)]),
    );
    schema
}

fn list_schema(info: &ResourceInfo, flavor: Flavor) -> Value {
    json!({
        "description": format!("{} is a list of {}", info.list_kind, info.kind),
        "type": "object",
        "required": ["items"],
        "properties": {
            "apiVersion": {"type": "string", "description": API_VERSION_DESCRIPTION},
            "items": {
                "type": "array",
                "description": format!("List of {}. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md", info.plural),
                "items": flavor.reference(&definition_name(info, &info.kind)),
            },
            "kind": {"type": "string", "description": KIND_DESCRIPTION},
            "metadata": metadata_property(flavor, true),
        },
        "x-kubernetes-group-version-kind": [gvk(info, &info.list_kind)],
    })
}

fn query_param(flavor: Flavor, name: &str, description: &str, type_: &str) -> Value {
    match flavor {
        Flavor::V3 => {
            json!({"name": name, "in": "query", "description": description, "schema": {"type": type_, "uniqueItems": true}})
        }
        Flavor::V2 => {
            json!({"name": name, "in": "query", "description": description, "type": type_, "uniqueItems": true})
        }
    }
}

fn path_param(flavor: Flavor, name: &str, description: &str) -> Value {
    match flavor {
        Flavor::V3 => {
            json!({"name": name, "in": "path", "description": description, "required": true, "schema": {"type": "string", "uniqueItems": true}})
        }
        Flavor::V2 => {
            json!({"name": name, "in": "path", "description": description, "required": true, "type": "string", "uniqueItems": true})
        }
    }
}

const FIELD_VALIDATION_DESCRIPTION: &str = "fieldValidation instructs the server on how to handle objects in the request (POST/PUT/PATCH) containing unknown or duplicate fields. Valid values are: - Ignore: This will ignore any unknown fields that are silently dropped from the object, and will ignore all but the last duplicate field that the decoder encounters. This is the default behavior prior to v1.23. - Warn: This will send a warning via the standard warning response header for each unknown field that is dropped from the object, and for each duplicate field that is encountered. The request will still succeed if there are no other errors, and will only persist the last of any duplicate fields. This is the default in v1.23+ - Strict: This will fail the request with a BadRequest error if any unknown fields would be dropped from the object, or if any duplicate fields are present. The error returned from the server will contain all unknown and duplicate fields encountered.";

fn write_params(flavor: Flavor, patch: bool) -> Vec<Value> {
    let mut p = vec![
        query_param(
            flavor,
            "dryRun",
            "When present, indicates that modifications should not be persisted. An invalid or unrecognized dryRun directive will result in an error response and no further processing of the request. Valid values are: - All: all dry run stages will be processed",
            "string",
        ),
        query_param(
            flavor,
            "fieldManager",
            "fieldManager is a name associated with the actor or entity that is making these changes. The value must be less than or 128 characters long, and only contain printable characters, as defined by https://golang.org/pkg/unicode/#IsPrint.",
            "string",
        ),
        query_param(
            flavor,
            "fieldValidation",
            FIELD_VALIDATION_DESCRIPTION,
            "string",
        ),
    ];
    if patch {
        p.push(query_param(flavor, "force", "Force is going to \"force\" Apply requests. It means user will re-acquire conflicting fields owned by other people. Force flag must be unset for non-apply patch requests.", "boolean"));
    }
    p
}

fn list_params(flavor: Flavor) -> Vec<Value> {
    [
        ("allowWatchBookmarks", "allowWatchBookmarks requests watch events with type \"BOOKMARK\".", "boolean"),
        ("continue", "The continue option should be set when retrieving more results from the server.", "string"),
        ("fieldSelector", "A selector to restrict the list of returned objects by their fields. Defaults to everything.", "string"),
        ("labelSelector", "A selector to restrict the list of returned objects by their labels. Defaults to everything.", "string"),
        ("limit", "limit is a maximum number of responses to return for a list call.", "integer"),
        ("resourceVersion", "resourceVersion sets a constraint on what resource versions a request may be served from.", "string"),
        ("timeoutSeconds", "Timeout for the list/watch call.", "integer"),
        ("watch", "Watch for changes to the described resources and return them as a stream of add, update, and remove notifications.", "boolean"),
    ]
    .iter()
    .map(|(n, d, t)| query_param(flavor, n, d, t))
    .collect()
}

const JSON_TYPES: &[&str] = &[
    "application/json",
    "application/yaml",
    "application/vnd.kubernetes.protobuf",
];

fn patch_types(info: &ResourceInfo) -> Vec<&'static str> {
    let mut t = vec![
        "application/json-patch+json",
        "application/merge-patch+json",
    ];
    if !info.custom {
        // Deliberately without application/strategic-merge-patch+json: see the module docs.
    }
    t.push("application/apply-patch+yaml");
    t
}

/// One operation. `body` names the request body schema; `response` the 200 schema.
#[allow(clippy::too_many_arguments)]
fn operation(
    flavor: Flavor,
    info: &ResourceInfo,
    action: &str,
    operation_id: String,
    description: String,
    params: Vec<Value>,
    body: Option<(&str, Vec<&str>)>,
    response: &str,
) -> Value {
    let tag = if info.group.is_empty() {
        format!("core_{}", info.version)
    } else {
        format!("{}_{}", info.group.replace('.', "_"), info.version)
    };
    let mut op = json!({
        "tags": [tag],
        "description": description,
        "operationId": operation_id,
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": gvk(info, &info.kind),
    });
    let response_ref = flavor.reference(response);
    match flavor {
        Flavor::V3 => {
            if !params.is_empty() {
                op["parameters"] = json!(params);
            }
            if let Some((schema, types)) = &body {
                let content: Map<String, Value> = types
                    .iter()
                    .map(|t| (t.to_string(), json!({"schema": flavor.reference(schema)})))
                    .collect();
                op["requestBody"] = json!({"content": content, "required": true});
            }
            let content: Map<String, Value> = JSON_TYPES
                .iter()
                .map(|t| (t.to_string(), json!({"schema": response_ref})))
                .collect();
            op["responses"] = json!({
                "200": {"description": "OK", "content": content},
                "401": {"description": "Unauthorized"},
            });
        }
        Flavor::V2 => {
            let mut params = params;
            if let Some((schema, types)) = &body {
                params.insert(0, json!({"name": "body", "in": "body", "required": true, "schema": flavor.reference(schema)}));
                op["consumes"] = json!(types);
            } else {
                op["consumes"] = json!(["*/*"]);
            }
            if !params.is_empty() {
                op["parameters"] = json!(params);
            }
            op["produces"] = json!(JSON_TYPES);
            op["schemes"] = json!(["https"]);
            op["responses"] = json!({
                "200": {"description": "OK", "schema": response_ref},
                "401": {"description": "Unauthorized"},
            });
        }
    }
    op
}

/// The paths of one resource: collection, item, and status subresource.
fn resource_paths(info: &ResourceInfo, flavor: Flavor, out: &mut BTreeMap<String, Value>) {
    let root = if info.group.is_empty() {
        format!("/api/{}", info.version)
    } else {
        format!("/apis/{}/{}", info.group, info.version)
    };
    let kind_def = definition_name(info, &info.kind);
    let list_def = definition_name(info, &info.list_kind);
    let kind = &info.kind;
    let ns_word = if info.namespaced { "Namespaced" } else { "" };
    let scope_prefix = if info.namespaced {
        format!("{root}/namespaces/{{namespace}}/{}", info.plural)
    } else {
        format!("{root}/{}", info.plural)
    };
    let version_cap = {
        let g = info.group.split('.').next().unwrap_or("");
        let mut s: String = if g.is_empty() {
            "core".into()
        } else {
            g.to_string()
        };
        s.push_str(&capitalize(&info.version));
        capitalize(&s)
    };
    let common = |extra: Vec<Value>| {
        let mut p = Vec::new();
        if info.namespaced {
            p.push(path_param(
                flavor,
                "namespace",
                "object name and auth scope, such as for teams and projects",
            ));
        }
        p.extend(extra);
        p.push(query_param(
            flavor,
            "pretty",
            "If 'true', then the output is pretty printed.",
            "string",
        ));
        p
    };
    let json_bodies = vec!["application/json", "application/yaml"];

    // Collection.
    let mut collection = Map::new();
    collection.insert(
        "get".into(),
        operation(
            flavor,
            info,
            "list",
            format!("list{version_cap}{ns_word}{kind}"),
            format!("list or watch objects of kind {kind}"),
            list_params(flavor),
            None,
            &list_def,
        ),
    );
    collection.insert(
        "post".into(),
        operation(
            flavor,
            info,
            "post",
            format!("create{version_cap}{ns_word}{kind}"),
            format!("create a {kind}"),
            write_params(flavor, false),
            Some((&kind_def, json_bodies.clone())),
            &kind_def,
        ),
    );
    collection.insert(
        "delete".into(),
        operation(
            flavor,
            info,
            "deletecollection",
            format!("deleteCollection{version_cap}{ns_word}{kind}"),
            format!("delete collection of {kind}"),
            list_params(flavor),
            None,
            STATUS,
        ),
    );
    collection.insert("parameters".into(), json!(common(vec![])));
    out.insert(scope_prefix.clone(), Value::Object(collection));

    // Item.
    let name_param = path_param(flavor, "name", &format!("name of the {kind}"));
    // Read, replace and patch of an object (`sub` "") or of its status subresource (`sub`
    // "Status", `of` "status of ").
    let read_write = |ops: &mut Map<String, Value>, sub: &str, of: &str| {
        ops.insert(
            "get".into(),
            operation(
                flavor,
                info,
                "get",
                format!("read{version_cap}{ns_word}{kind}{sub}"),
                format!("read {of}the specified {kind}"),
                vec![],
                None,
                &kind_def,
            ),
        );
        ops.insert(
            "put".into(),
            operation(
                flavor,
                info,
                "put",
                format!("replace{version_cap}{ns_word}{kind}{sub}"),
                format!("replace {of}the specified {kind}"),
                write_params(flavor, false),
                Some((&kind_def, json_bodies.clone())),
                &kind_def,
            ),
        );
        ops.insert(
            "patch".into(),
            operation(
                flavor,
                info,
                "patch",
                format!("patch{version_cap}{ns_word}{kind}{sub}"),
                format!("partially update {of}the specified {kind}"),
                write_params(flavor, true),
                Some((
                    "io.k8s.apimachinery.pkg.apis.meta.v1.Patch",
                    patch_types(info),
                )),
                &kind_def,
            ),
        );
    };
    let mut item = Map::new();
    read_write(&mut item, "", "");
    item.insert(
        "delete".into(),
        operation(
            flavor,
            info,
            "delete",
            format!("delete{version_cap}{ns_word}{kind}"),
            format!("delete a {kind}"),
            vec![],
            None,
            STATUS,
        ),
    );
    item.insert("parameters".into(), json!(common(vec![name_param.clone()])));
    out.insert(format!("{scope_prefix}/{{name}}"), Value::Object(item));

    if info.status_subresource {
        let mut status = Map::new();
        read_write(&mut status, "Status", "status of ");
        status.insert("parameters".into(), json!(common(vec![name_param])));
        out.insert(
            format!("{scope_prefix}/{{name}}/status"),
            Value::Object(status),
        );
    }

    if info.namespaced {
        let mut all = Map::new();
        all.insert(
            "get".into(),
            operation(
                flavor,
                info,
                "list",
                format!("list{version_cap}{kind}ForAllNamespaces"),
                format!("list or watch objects of kind {kind}"),
                list_params(flavor),
                None,
                &list_def,
            ),
        );
        out.insert(format!("{root}/{}", info.plural), Value::Object(all));
    }
}

fn capitalize(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

/// Schemas of the given resources, plus the meta types.
fn schemas(resources: &[&ResourceInfo], flavor: Flavor) -> Map<String, Value> {
    let mut out = Map::new();
    for (k, v) in meta_definitions() {
        let mut v = v.clone();
        if flavor == Flavor::V2 {
            to_v2_refs(&mut v);
        }
        out.insert(k.clone(), v);
    }
    out.insert(
        "io.k8s.apimachinery.pkg.apis.meta.v1.Patch".into(),
        json!({"description": "Patch is provided to give a concrete name and type to the Kubernetes PATCH request body.", "type": "object"}),
    );
    for info in resources {
        out.insert(definition_name(info, &info.kind), kind_schema(info, flavor));
        out.insert(
            definition_name(info, &info.list_kind),
            list_schema(info, flavor),
        );
    }
    out
}

/// Resources whose path operations a document carries: one per group/version/plural
/// (subresources such as `workspaces/status` are described through `status_subresource`).
fn top_level(resources: &[ResourceInfo]) -> Vec<&ResourceInfo> {
    resources
        .iter()
        .filter(|r| !r.plural.contains('/'))
        .collect()
}

/// `GET /openapi/v3/api/v1` or `/openapi/v3/apis/{g}/{v}`: `None` when nothing is served in
/// that group version (the REST layer answers 404).
pub fn v3_group_version(group: &str, version: &str, resources: &[ResourceInfo]) -> Option<Value> {
    let selected: Vec<&ResourceInfo> = top_level(resources)
        .into_iter()
        .filter(|r| r.group == group && r.version == version)
        .collect();
    if selected.is_empty() {
        return None;
    }
    let mut paths = BTreeMap::new();
    for info in &selected {
        resource_paths(info, Flavor::V3, &mut paths);
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.33.0"},
        "paths": paths,
        "components": {"schemas": schemas(&selected, Flavor::V3)},
    }))
}

/// `GET /openapi/v3`: every served group version with the URL of its document.
pub fn v3_index(resources: &[ResourceInfo]) -> Value {
    let mut gvs: BTreeMap<(String, String), ()> = BTreeMap::new();
    for r in top_level(resources) {
        gvs.insert((r.group.clone(), r.version.clone()), ());
    }
    let mut paths = Map::new();
    for (group, version) in gvs.keys() {
        let key = if group.is_empty() {
            format!("api/{version}")
        } else {
            format!("apis/{group}/{version}")
        };
        let hash = v3_group_version(group, version, resources)
            .map(|doc| {
                let digest = Sha256::digest(crate::gofmt::canonical_json(&doc).as_bytes());
                digest
                    .iter()
                    .map(|b| format!("{b:02X}"))
                    .collect::<String>()
            })
            .unwrap_or_default();
        paths.insert(
            key.clone(),
            json!({"serverRelativeURL": format!("/openapi/v3/{key}?hash={hash}")}),
        );
    }
    json!({"paths": paths})
}

/// `GET /openapi/v2`: all served resources in one swagger 2.0 document.
pub fn v2_document(resources: &[ResourceInfo]) -> Value {
    let selected = top_level(resources);
    let mut paths = BTreeMap::new();
    for info in &selected {
        resource_paths(info, Flavor::V2, &mut paths);
    }
    json!({
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": "v1.33.0"},
        "paths": paths,
        "definitions": schemas(&selected, Flavor::V2),
        "securityDefinitions": {"BearerToken": {"type": "apiKey", "name": "authorization", "in": "header", "description": "Bearer Token authentication"}},
        "security": [{"BearerToken": []}],
    })
}

/// The media types kube-openapi serves `/openapi/v2` in, in its order of preference.
pub const V2_MEDIA_TYPES: &[&str] = &[
    "application/json",
    v2proto::MEDIA_TYPE,
    v2proto::MEDIA_TYPE_DOTTED,
];
/// The media types of the v3 documents the simulator serves (not their protobuf form).
pub const V3_MEDIA_TYPES: &[&str] = &["application/json"];

/// The offer an Accept header picks, as kube-openapi's handlers pick it (goautoneg):
/// clauses by descending `q` (more specific first among equals, `q=0` never), each
/// against the offers in order, `*` matching any type or subtype. An absent or empty
/// header accepts anything. `None`: 406 Not Acceptable.
pub fn negotiate<'a>(accept: Option<&str>, offers: &[&'a str]) -> Option<&'a str> {
    let accept = accept
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .unwrap_or("*/*");
    let mut clauses: Vec<(f32, u8, &str, &str)> = accept
        .split(',')
        .filter_map(|clause| {
            let mut parts = clause.split(';');
            let media = parts.next()?.trim();
            let (ty, sub) = media.split_once('/').unwrap_or((media, "*"));
            let q = parts
                .filter_map(|p| p.trim().strip_prefix("q="))
                .find_map(|q| q.trim().parse::<f32>().ok())
                .unwrap_or(1.0);
            let specificity = u8::from(ty != "*") + u8::from(sub != "*");
            Some((q, specificity, ty, sub))
        })
        .filter(|(q, ..)| *q > 0.0)
        .collect();
    clauses.sort_by(|a, b| b.0.total_cmp(&a.0).then(b.1.cmp(&a.1)));
    clauses.iter().find_map(|(_, _, ty, sub)| {
        offers.iter().copied().find(|offer| {
            let (oty, osub) = offer.split_once('/').unwrap_or((offer, ""));
            (*ty == "*" || *ty == oty) && (*sub == "*" || *sub == osub)
        })
    })
}

pub mod v2proto;

#[cfg(test)]
mod tests;
