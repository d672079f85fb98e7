//! From a Pod's spec to what a local process needs: the program and its arguments, the
//! environment (literal values, `$(VAR)` references, Secret and ConfigMap keys, a few
//! `fieldRef`s), the working directory and the termination message file — with every
//! container path that a volume mount or the termination message path names rewritten
//! to its folder on this host, since local processes share the host's filesystem.
//!
//! Pure functions over JSON: the store is reached only through the `lookup` closure.

use base64::Engine as _;
use serde_json::Value;
use std::collections::HashMap;
use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Finds a Secret (`"secrets"`) or ConfigMap (`"configmaps"`) of the Pod's namespace.
pub type Lookup<'a> = &'a dyn Fn(&str, &str) -> Option<Arc<Value>>;

/// Why a container cannot start yet (its `state.waiting`).
#[derive(Clone, Debug, PartialEq)]
pub enum Blocked {
    /// `CreateContainerConfigError`: a referenced Secret/ConfigMap or key is missing;
    /// retried, as the kubelet does.
    Config(String),
    /// `ErrImagePull`: no command and no image override, so nothing can run.
    Image(String),
}

/// What the simulator knows about this host.
pub struct Host<'a> {
    /// The Pod's folder (volumes, logs, termination messages, PATH shims).
    pub pod_dir: &'a Path,
    /// Volume name → its folder on the host.
    pub volumes: &'a HashMap<String, PathBuf>,
    pub image_overrides: &'a [(String, PathBuf)],
    pub command_overrides: &'a [(String, PathBuf)],
    /// Host environment variables passed through (PATH, HOME, ...).
    pub base_env: &'a [(String, OsString)],
}

/// A container ready to start as a local process.
#[derive(Clone, Debug)]
pub struct Plan {
    pub program: String,
    pub args: Vec<String>,
    pub env: Vec<(String, OsString)>,
    pub cwd: PathBuf,
    pub termination_path: PathBuf,
    pub fallback_to_logs: bool,
}

pub fn bin_dir(pod_dir: &Path) -> PathBuf {
    pod_dir.join("bin")
}

pub fn log_path(pod_dir: &Path, container: &str, previous: bool) -> PathBuf {
    let file = if previous {
        format!("{container}.previous.log")
    } else {
        format!("{container}.log")
    };
    pod_dir.join("logs").join(file)
}

/// The environment variable naming a mount's host folder: `TERRACE_SIM_MOUNT_<NAME>`,
/// NAME the mount's volume name upper-cased with other characters than letters and
/// digits as `_`.
pub fn mount_env_name(volume: &str) -> String {
    let name: String = volume
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect();
    format!("TERRACE_SIM_MOUNT_{name}")
}

fn path_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '/')
}

/// Replaces each occurrence of a container path (`from`) that stands as a path of its
/// own — at the start or after a non-path character, and followed by the end, `/` or a
/// non-path character — with its host path. Longer container paths win.
pub fn rewrite(s: &str, pairs: &[(String, String)]) -> String {
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    let mut prev: Option<char> = None;
    'outer: while i < s.len() {
        if prev.is_none_or(|c| !path_char(c)) {
            for (from, to) in pairs {
                if from.is_empty() || !s[i..].starts_with(from.as_str()) {
                    continue;
                }
                let next = s[i + from.len()..].chars().next();
                if next.is_none_or(|c| c == '/' || !path_char(c)) {
                    out.push_str(to);
                    i += from.len();
                    prev = from.chars().last();
                    continue 'outer;
                }
            }
        }
        let Some(c) = s[i..].chars().next() else {
            break;
        };
        out.push(c);
        prev = Some(c);
        i += c.len_utf8();
    }
    out
}

/// `$(VAR)` expansion as the kubelet does it: known names are replaced, unknown
/// references stay as written, `$$` is a literal `$`.
pub fn expand(s: &str, lookup: &dyn Fn(&str) -> Option<String>) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(pos) = rest.find('$') {
        out.push_str(&rest[..pos]);
        let tail = &rest[pos..];
        if let Some(after) = tail.strip_prefix("$$") {
            out.push('$');
            rest = after;
        } else if let Some(body) = tail.strip_prefix("$(")
            && let Some(end) = body.find(')')
        {
            let name = &body[..end];
            match lookup(name) {
                Some(v) => out.push_str(&v),
                None => out.push_str(&tail[..end + 3]),
            }
            rest = &body[end + 1..];
        } else {
            out.push('$');
            rest = &tail[1..];
        }
    }
    out.push_str(rest);
    out
}

/// The elements of the list at `ptr` in `v` (none when it is absent or not a list).
fn list_at<'a>(v: &'a Value, ptr: &str) -> impl Iterator<Item = &'a Value> {
    v.pointer(ptr)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

fn str_at<'a>(v: &'a Value, ptr: &str) -> Option<&'a str> {
    v.pointer(ptr).and_then(Value::as_str)
}

fn strings(v: Option<&Value>) -> Option<Vec<String>> {
    v.and_then(Value::as_array).map(|a| {
        a.iter()
            .map(|x| x.as_str().unwrap_or("").to_string())
            .collect()
    })
}

/// A key of a Secret (`data` base64, or `stringData`) or ConfigMap (`data`,
/// `binaryData`).
pub fn key_bytes(obj: &Value, key: &str) -> Option<Vec<u8>> {
    for field in ["data", "binaryData"] {
        if let Some(v) = obj
            .get(field)
            .and_then(|d| d.get(key))
            .and_then(Value::as_str)
        {
            let secret_or_binary =
                obj.get("kind").and_then(Value::as_str) == Some("Secret") || field == "binaryData";
            return Some(if secret_or_binary {
                base64::engine::general_purpose::STANDARD
                    .decode(v)
                    .unwrap_or_else(|_| v.as_bytes().to_vec())
            } else {
                v.as_bytes().to_vec()
            });
        }
    }
    obj.get("stringData")
        .and_then(|d| d.get(key))
        .and_then(Value::as_str)
        .map(|s| s.as_bytes().to_vec())
}

/// Every key of a Secret or ConfigMap.
pub fn all_keys(obj: &Value) -> Vec<String> {
    let mut keys = Vec::new();
    for field in ["data", "binaryData", "stringData"] {
        if let Some(m) = obj.get(field).and_then(Value::as_object) {
            for k in m.keys() {
                if !keys.contains(k) {
                    keys.push(k.clone());
                }
            }
        }
    }
    keys
}

fn key_ref(
    r: &Value,
    plural: &str,
    kind: &str,
    ns: &str,
    lookup: Lookup<'_>,
) -> Result<Option<Vec<u8>>, String> {
    let name = str_at(r, "/name").unwrap_or("");
    let key = str_at(r, "/key").unwrap_or("");
    let optional = r.get("optional").and_then(Value::as_bool) == Some(true);
    let Some(obj) = lookup(plural, name) else {
        return if optional {
            Ok(None)
        } else {
            Err(format!("{} \"{name}\" not found", kind.to_lowercase()))
        };
    };
    match key_bytes(&obj, key) {
        Some(b) => Ok(Some(b)),
        None if optional => Ok(None),
        None => Err(format!("couldn't find key {key} in {kind} {ns}/{name}")),
    }
}

fn field_ref(pod: &Value, path: &str) -> Option<String> {
    let simple = match path {
        "metadata.name" => str_at(pod, "/metadata/name"),
        "metadata.namespace" => str_at(pod, "/metadata/namespace"),
        "metadata.uid" => str_at(pod, "/metadata/uid"),
        "spec.nodeName" => str_at(pod, "/spec/nodeName"),
        "spec.serviceAccountName" => str_at(pod, "/spec/serviceAccountName"),
        "status.podIP" | "status.hostIP" => Some("127.0.0.1"),
        _ => None,
    };
    if let Some(s) = simple {
        return Some(s.to_string());
    }
    for (prefix, field) in [
        ("metadata.labels['", "labels"),
        ("metadata.annotations['", "annotations"),
    ] {
        if let Some(k) = path.strip_prefix(prefix).and_then(|r| r.strip_suffix("']")) {
            return pod
                .pointer(&format!("/metadata/{field}"))
                .and_then(|m| m.get(k))
                .and_then(Value::as_str)
                .map(str::to_string);
        }
    }
    None
}

/// The container's environment in the kubelet's order: `envFrom`, then `env` (later
/// names win), `$(VAR)` references resolved against what came before.
fn environment(
    pod: &Value,
    c: &Value,
    pairs: &[(String, String)],
    lookup: Lookup<'_>,
) -> Result<Vec<(String, OsString)>, Blocked> {
    let ns = str_at(pod, "/metadata/namespace").unwrap_or("");
    let mut env: Vec<(String, OsString)> = Vec::new();
    let set = |env: &mut Vec<(String, OsString)>, k: String, v: OsString| {
        env.retain(|(n, _)| *n != k);
        env.push((k, v));
    };
    for from in list_at(c, "/envFrom") {
        let prefix = str_at(from, "/prefix").unwrap_or("");
        for (field, plural, kind) in [
            ("secretRef", "secrets", "Secret"),
            ("configMapRef", "configmaps", "ConfigMap"),
        ] {
            let Some(r) = from.get(field) else { continue };
            let name = str_at(r, "/name").unwrap_or("");
            match lookup(plural, name) {
                Some(obj) => {
                    for k in all_keys(&obj) {
                        if let Some(b) = key_bytes(&obj, &k) {
                            set(&mut env, format!("{prefix}{k}"), OsString::from_vec(b));
                        }
                    }
                }
                None if r.get("optional").and_then(Value::as_bool) == Some(true) => {}
                None => {
                    return Err(Blocked::Config(format!(
                        "{} \"{name}\" not found",
                        kind.to_lowercase()
                    )));
                }
            }
        }
    }
    for e in list_at(c, "/env") {
        let name = str_at(e, "/name").unwrap_or("").to_string();
        if let Some(v) = e.get("value").and_then(Value::as_str) {
            let known = |n: &str| {
                env.iter()
                    .find(|(k, _)| k == n)
                    .map(|(_, v)| v.to_string_lossy().into_owned())
            };
            let v = rewrite(&expand(v, &known), pairs);
            set(&mut env, name, v.into());
            continue;
        }
        let Some(from) = e.get("valueFrom") else {
            set(&mut env, name, OsString::new());
            continue;
        };
        let value = if let Some(r) = from.get("secretKeyRef") {
            key_ref(r, "secrets", "Secret", ns, lookup).map_err(Blocked::Config)?
        } else if let Some(r) = from.get("configMapKeyRef") {
            key_ref(r, "configmaps", "ConfigMap", ns, lookup).map_err(Blocked::Config)?
        } else if let Some(p) = str_at(from, "/fieldRef/fieldPath") {
            field_ref(pod, p).map(String::into_bytes)
        } else {
            None
        };
        if let Some(v) = value {
            set(&mut env, name, OsString::from_vec(v));
        }
    }
    Ok(env)
}

/// Plans one container of `pod`, or says why it cannot start.
pub fn plan(host: &Host<'_>, pod: &Value, c: &Value, lookup: Lookup<'_>) -> Result<Plan, Blocked> {
    let name = str_at(c, "/name").unwrap_or("");
    let image = str_at(c, "/image").unwrap_or("");
    let termination_path = host.pod_dir.join("termination").join(name);
    let tm = str_at(c, "/terminationMessagePath").unwrap_or("/dev/termination-log");
    let mut pairs: Vec<(String, String)> = vec![(
        tm.to_string(),
        termination_path.to_string_lossy().into_owned(),
    )];
    let mut mount_env = Vec::new();
    for m in list_at(c, "/volumeMounts") {
        let vol = str_at(m, "/name").unwrap_or("");
        let path = str_at(m, "/mountPath").unwrap_or("").trim_end_matches('/');
        let Some(dir) = host.volumes.get(vol) else {
            continue;
        };
        let mut host_path = dir.clone();
        if let Some(sub) = str_at(m, "/subPath").filter(|s| !s.is_empty()) {
            host_path = host_path.join(sub);
        }
        if !path.is_empty() {
            pairs.push((path.to_string(), host_path.to_string_lossy().into_owned()));
        }
        mount_env.push((mount_env_name(vol), host_path.into_os_string()));
    }
    pairs.sort_by_key(|(from, _)| std::cmp::Reverse(from.len()));
    let mut env = host.base_env.to_vec();
    let user_env = environment(pod, c, &pairs, lookup)?;
    let path_env = user_env
        .iter()
        .find(|(k, _)| k == "PATH")
        .or_else(|| env.iter().find(|(k, _)| k == "PATH"))
        .map(|(_, v)| v.clone())
        .unwrap_or_else(|| OsString::from("/usr/local/bin:/usr/bin:/bin"));
    for (k, v) in user_env.into_iter().chain(mount_env) {
        env.retain(|(n, _)| *n != k);
        env.push((k, v));
    }
    let mut path = bin_dir(host.pod_dir).into_os_string();
    path.push(":");
    path.push(path_env);
    env.retain(|(n, _)| n != "PATH");
    env.push(("PATH".into(), path));
    let known = |n: &str| {
        env.iter()
            .find(|(k, _)| k == n)
            .map(|(_, v)| v.to_string_lossy().into_owned())
    };
    // A command override's path is a path of this machine (`terrace dev --engine`), never
    // one inside a container: it stays as it is even under a mounted path (an emptyDir at
    // /tmp would otherwise swallow an engine kept in /tmp).
    let fix = |s: &str| {
        let expanded = expand(s, &known);
        if host
            .command_overrides
            .iter()
            .any(|(_, p)| p.as_os_str() == expanded.as_str())
        {
            expanded
        } else {
            rewrite(&expanded, &pairs)
        }
    };
    let args: Vec<String> = strings(c.get("args"))
        .unwrap_or_default()
        .iter()
        .map(|a| fix(a))
        .collect();
    let command = strings(c.get("command")).filter(|v| !v.is_empty());
    let (program, args) = match command {
        Some(cmd) => {
            let first = cmd[0].as_str();
            let base = first.rsplit('/').next().unwrap_or(first);
            let program = host
                .command_overrides
                .iter()
                .find(|(n, _)| n == first || n == base)
                .map(|(_, p)| p.to_string_lossy().into_owned())
                .unwrap_or_else(|| fix(first));
            let mut all: Vec<String> = cmd[1..].iter().map(|a| fix(a)).collect();
            all.extend(args);
            (program, all)
        }
        None => {
            let repo = image.split('@').next().unwrap_or(image);
            let untagged = match repo.rsplit_once(':') {
                Some((r, tag)) if !tag.contains('/') => r,
                _ => repo,
            };
            let Some((_, p)) = host
                .image_overrides
                .iter()
                .find(|(i, _)| i == image || i == untagged)
            else {
                return Err(Blocked::Image(format!(
                    "Failed to pull image \"{image}\": the terrace simulator runs no images; give container \"{name}\" a command or configure an image override"
                )));
            };
            (p.to_string_lossy().into_owned(), args)
        }
    };
    let cwd = match str_at(c, "/workingDir").filter(|w| !w.is_empty()) {
        Some(w) => PathBuf::from(fix(w)),
        None => host.pod_dir.join("cwd"),
    };
    Ok(Plan {
        program,
        args,
        env,
        cwd,
        termination_path,
        fallback_to_logs: str_at(c, "/terminationMessagePolicy") == Some("FallbackToLogsOnError"),
    })
}

/// The Pod's volumes as host folders: `emptyDir` (and any other kind, see README) as a
/// new folder, `hostPath` as itself, `secret`/`configMap` as a folder holding their keys
/// (or `items`) as files. A missing non-optional Secret/ConfigMap is the kubelet's
/// `FailedMount` message.
pub fn volumes(
    pod: &Value,
    pod_dir: &Path,
    lookup: Lookup<'_>,
) -> Result<HashMap<String, PathBuf>, String> {
    let mut out = HashMap::new();
    for v in list_at(pod, "/spec/volumes") {
        let name = str_at(v, "/name").unwrap_or("").to_string();
        if let Some(p) = str_at(v, "/hostPath/path") {
            out.insert(name, PathBuf::from(p));
            continue;
        }
        let dir = pod_dir.join("volumes").join(&name);
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("MountVolume.SetUp failed for volume \"{name}\" : {e}"))?;
        for (field, plural, kind, name_field) in [
            ("secret", "secrets", "secret", "secretName"),
            ("configMap", "configmaps", "configmap", "name"),
        ] {
            let Some(src) = v.get(field) else { continue };
            let obj_name = str_at(src, &format!("/{name_field}")).unwrap_or("");
            let Some(obj) = lookup(plural, obj_name) else {
                if src.get("optional").and_then(Value::as_bool) == Some(true) {
                    continue;
                }
                return Err(format!(
                    "MountVolume.SetUp failed for volume \"{name}\" : {kind} \"{obj_name}\" not found"
                ));
            };
            let items: Vec<(String, String)> = match src.get("items").and_then(Value::as_array) {
                Some(items) => items
                    .iter()
                    .map(|i| {
                        (
                            str_at(i, "/key").unwrap_or("").to_string(),
                            str_at(i, "/path").unwrap_or("").to_string(),
                        )
                    })
                    .collect(),
                None => all_keys(&obj).into_iter().map(|k| (k.clone(), k)).collect(),
            };
            for (key, rel) in items {
                let Some(bytes) = key_bytes(&obj, &key) else {
                    continue;
                };
                if rel.is_empty() || rel.split('/').any(|p| p == "..") || rel.starts_with('/') {
                    continue;
                }
                let file = dir.join(&rel);
                if let Some(parent) = file.parent() {
                    let _ = std::fs::create_dir_all(parent);
                }
                std::fs::write(&file, bytes)
                    .map_err(|e| format!("MountVolume.SetUp failed for volume \"{name}\" : {e}"))?;
            }
        }
        out.insert(name, dir);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    /// Copies the kubelet's bind mounts: a mount path names the volume folder wherever
    /// it stands as a path (own word, after `=`, followed by `/`), never as part of a
    /// longer name.
    #[test]
    fn rewrites_mount_paths_only_as_paths() {
        let p = pairs(&[("/data/sub", "/h/s"), ("/data", "/h/d")]);
        assert_eq!(
            rewrite(
                "cat /data/x > /data/sub/y; ls /database /x/data --o=/data",
                &p
            ),
            "cat /h/d/x > /h/s/y; ls /database /x/data --o=/h/d"
        );
        assert_eq!(rewrite("/data", &p), "/h/d");
        assert_eq!(rewrite("ünï /data", &p), "ünï /h/d");
    }

    /// Copies the kubelet's `$(VAR)` expansion (`expansion.Expand`): known names are
    /// substituted, unknown ones kept, `$$` escapes.
    #[test]
    fn expands_references() {
        let f = |n: &str| (n == "A").then(|| "x".to_string());
        assert_eq!(expand("$(A)-$(B)-$$(A)-$", &f), "x-$(B)-$(A)-$");
    }

    /// Copies kubelet's env from a Secret: a missing key is `CreateContainerConfigError`
    /// with the kubelet's message; an optional one is skipped.
    #[test]
    fn secret_key_refs() {
        let pod = json!({"metadata": {"name": "p", "namespace": "n"}});
        let secret = json!({"kind": "Secret", "data": {"k": "c2VjcmV0"}});
        let lookup = move |plural: &str, name: &str| {
            (plural == "secrets" && name == "s").then(|| Arc::new(secret.clone()))
        };
        let c = json!({"name": "c", "env": [
            {"name": "V", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
            {"name": "O", "valueFrom": {"secretKeyRef": {"name": "s", "key": "nope", "optional": true}}},
            {"name": "W", "value": "$(V)!"}
        ]});
        let env = environment(&pod, &c, &[], &lookup);
        assert_eq!(
            env,
            Ok(vec![
                ("V".to_string(), OsString::from("secret")),
                ("W".to_string(), OsString::from("secret!"))
            ])
        );
        let bad = json!({"name": "c", "env": [{"name": "V", "valueFrom": {"secretKeyRef": {"name": "s", "key": "x"}}}]});
        assert_eq!(
            environment(&pod, &bad, &[], &lookup),
            Err(Blocked::Config("couldn't find key x in Secret n/s".into()))
        );
        let gone = json!({"name": "c", "env": [{"name": "V", "valueFrom": {"secretKeyRef": {"name": "t", "key": "x"}}}]});
        assert_eq!(
            environment(&pod, &gone, &[], &lookup),
            Err(Blocked::Config("secret \"t\" not found".into()))
        );
    }
}
