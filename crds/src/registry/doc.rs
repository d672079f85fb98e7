//! What a published module version holds, as the registry shows it (docs/registry.md,
//! "What a version shows"): for the root module, each submodule (`modules/NAME`) and each
//! example (`examples/NAME`), its inputs, outputs, resources, provider and module
//! dependencies and README, read from the `.tf` files of the version's archive when it is
//! uploaded ([`describe`]). A file that is not valid HCL refuses the version
//! (`reg_ingress_failed`, with the file and the parser's words).
//!
//! Bounded so a description stays a small part of a Kubernetes object: each README is cut
//! at [`MAX_README_BYTES`], each description at [`MAX_TEXT_BYTES`], each list at
//! [`MAX_ITEMS`] (`truncated` then says so); [`WANTED_BYTES`] of files are read at most.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use hcl::{Block, Body, Expression};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// Most bytes of one README kept.
pub const MAX_README_BYTES: usize = 32 << 10;
/// Most bytes of one description kept.
pub const MAX_TEXT_BYTES: usize = 2 << 10;
/// Most entries of one list (inputs, outputs, resources, …) kept.
pub const MAX_ITEMS: usize = 500;
/// Most bytes of `.tf` files and READMEs read from one archive.
pub const WANTED_BYTES: u64 = 8 << 20;

/// The described modules of a version.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModuleDoc {
    /// The root module.
    pub root: ModuleDescription,
    /// `modules/NAME`, by path.
    #[serde(default)]
    pub submodules: Vec<ModuleDescription>,
    /// `examples/NAME`, by path.
    #[serde(default)]
    pub examples: Vec<ModuleDescription>,
    /// Something was cut to the limits (a README, a description, a long list).
    #[serde(default)]
    pub truncated: bool,
}

/// One module of a version.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModuleDescription {
    /// Its directory in the archive (empty for the root).
    #[serde(default)]
    pub path: String,
    /// Its name (the directory's last part; empty for the root).
    #[serde(default)]
    pub name: String,
    /// Its README.md (cut at 32 KiB).
    #[serde(default)]
    pub readme: String,
    /// It has no `.tf` files.
    #[serde(default)]
    pub empty: bool,
    /// Its `variable` blocks, by name.
    #[serde(default)]
    pub inputs: Vec<Input>,
    /// Its `output` blocks, by name.
    #[serde(default)]
    pub outputs: Vec<Output>,
    /// Module calls.
    #[serde(default)]
    pub dependencies: Vec<Dependency>,
    /// The providers it needs, by local name.
    #[serde(default)]
    pub provider_dependencies: Vec<ProviderDependency>,
    /// Its `resource` blocks, in file order.
    #[serde(default)]
    pub resources: Vec<Resource>,
}

/// A `variable` block.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Input {
    /// The variable's name.
    pub name: String,
    /// The type constraint as written (`list(string)`), empty when none.
    #[serde(default)]
    pub r#type: String,
    /// Its description (cut at 2 KiB).
    #[serde(default)]
    pub description: String,
    /// The default as JSON (`"\"eu-west-1\""`, `"3"`), empty when none.
    #[serde(default)]
    pub default: String,
    /// No default: a caller must set it.
    #[serde(default)]
    pub required: bool,
    /// Declared `sensitive = true`.
    #[serde(default)]
    pub sensitive: bool,
}

/// An `output` block.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Output {
    /// The output's name.
    pub name: String,
    /// Its description (cut at 2 KiB).
    #[serde(default)]
    pub description: String,
    /// Declared `sensitive = true`.
    #[serde(default)]
    pub sensitive: bool,
}

/// A `module` call.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Dependency {
    /// The call's name.
    pub name: String,
    /// Its `source` as written.
    #[serde(default)]
    pub source: String,
    /// Its `version` constraint, empty when none.
    #[serde(default)]
    pub version: String,
}

/// A provider the module needs (declared in `required_providers`, or used by a resource,
/// data source or `provider` block).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProviderDependency {
    /// Its local name (`aws`).
    pub name: String,
    /// `hashicorp` in `hashicorp/aws`.
    #[serde(default)]
    pub namespace: String,
    /// `hashicorp/aws`.
    #[serde(default)]
    pub source: String,
    /// The version constraint, empty when none.
    #[serde(default)]
    pub version: String,
}

/// A `resource` block.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Resource {
    /// The block's name (`this` of `resource "aws_vpc" "this"`).
    pub name: String,
    /// Its resource type (`aws_vpc`).
    pub r#type: String,
}

/// Whether [`describe`] reads the file at `path` (relative to the archive's root): `.tf`
/// files and READMEs of the root, `modules/NAME` and `examples/NAME`.
pub fn wanted(path: &Path) -> bool {
    let Some(file) = path.file_name().and_then(|f| f.to_str()) else {
        return false;
    };
    let interesting = file.ends_with(".tf") || is_readme(file);
    interesting && module_dir(path).is_some()
}

fn is_readme(file: &str) -> bool {
    file.eq_ignore_ascii_case("readme.md")
}

/// The described module directory a file belongs to (`""`, `modules/x`, `examples/y`).
fn module_dir(path: &Path) -> Option<String> {
    let parts: Vec<&str> = path.iter().filter_map(|p| p.to_str()).collect();
    match parts.as_slice() {
        [_] => Some(String::new()),
        [top @ ("modules" | "examples"), name, _] => Some(format!("{top}/{name}")),
        _ => None,
    }
}

/// Describes a version from its kept files (relative path → contents); the error names
/// the file that is not valid HCL (or not UTF-8) and why.
pub fn describe(files: &BTreeMap<std::path::PathBuf, Vec<u8>>) -> Result<ModuleDoc, String> {
    let mut dirs: BTreeMap<String, Dir> = BTreeMap::new();
    dirs.entry(String::new()).or_default();
    for (path, bytes) in files {
        let Some(dir) = module_dir(path) else {
            continue;
        };
        let shown = path.display().to_string();
        let text = std::str::from_utf8(bytes).map_err(|_| format!("{shown} is not UTF-8 text"))?;
        let d = dirs.entry(dir).or_default();
        let file = path
            .file_name()
            .and_then(|f| f.to_str())
            .unwrap_or_default();
        if is_readme(file) {
            d.readme = Some(text.to_owned());
        } else {
            let body = hcl::parse(text).map_err(|e| format!("{shown}: {e}"))?;
            d.bodies.push(body);
        }
    }
    let mut doc = ModuleDoc::default();
    for (path, dir) in dirs {
        let (m, cut) = dir.describe(&path);
        doc.truncated |= cut;
        if path.is_empty() {
            doc.root = m;
        } else if path.starts_with("modules/") {
            doc.submodules.push(m);
        } else {
            doc.examples.push(m);
        }
    }
    Ok(doc)
}

/// The files of one module directory.
#[derive(Default)]
struct Dir {
    readme: Option<String>,
    bodies: Vec<Body>,
}

impl Dir {
    fn describe(self, path: &str) -> (ModuleDescription, bool) {
        let mut cut = false;
        let mut m = ModuleDescription {
            path: path.to_owned(),
            name: path.rsplit('/').next().unwrap_or_default().to_owned(),
            empty: self.bodies.is_empty(),
            ..Default::default()
        };
        if let Some(r) = self.readme {
            m.readme = clip(r, MAX_README_BYTES, &mut cut);
        }
        let mut declared: BTreeMap<String, ProviderDependency> = BTreeMap::new();
        let mut used: BTreeSet<String> = BTreeSet::new();
        for block in self.bodies.iter().flat_map(|b| b.blocks()) {
            let labels: Vec<&str> = block.labels().iter().map(|l| l.as_str()).collect();
            match (block.identifier(), labels.as_slice()) {
                ("variable", [name]) => m.inputs.push(input(name, block, &mut cut)),
                ("output", [name]) => m.outputs.push(Output {
                    name: (*name).to_owned(),
                    description: text_attr(block, "description", &mut cut),
                    sensitive: bool_attr(block, "sensitive"),
                }),
                ("resource", [kind, name]) => {
                    used.insert(provider_of(kind, block));
                    m.resources.push(Resource {
                        name: (*name).to_owned(),
                        r#type: (*kind).to_owned(),
                    });
                }
                ("data", [kind, _]) => {
                    used.insert(provider_of(kind, block));
                }
                ("provider", [name]) => {
                    used.insert((*name).to_owned());
                }
                ("module", [name]) => m.dependencies.push(Dependency {
                    name: (*name).to_owned(),
                    source: text_attr(block, "source", &mut cut),
                    version: text_attr(block, "version", &mut cut),
                }),
                ("terraform", []) => {
                    for rp in block
                        .body()
                        .blocks()
                        .filter(|b| b.identifier() == "required_providers")
                    {
                        for a in rp.body().attributes() {
                            declared
                                .insert(a.key().to_owned(), required_provider(a.key(), a.expr()));
                        }
                    }
                }
                _ => {}
            }
        }
        for name in used {
            // terraform_data and terraform_remote_state are the engine's own.
            if name != "terraform" && !declared.contains_key(&name) {
                let p = required_provider(&name, &Expression::Null);
                declared.insert(name, p);
            }
        }
        m.provider_dependencies = declared.into_values().collect();
        m.inputs.sort_by(|a, b| a.name.cmp(&b.name));
        m.outputs.sort_by(|a, b| a.name.cmp(&b.name));
        cap(&mut m.inputs, &mut cut);
        cap(&mut m.outputs, &mut cut);
        cap(&mut m.dependencies, &mut cut);
        cap(&mut m.provider_dependencies, &mut cut);
        cap(&mut m.resources, &mut cut);
        (m, cut)
    }
}

fn cap<T>(list: &mut Vec<T>, cut: &mut bool) {
    if list.len() > MAX_ITEMS {
        list.truncate(MAX_ITEMS);
        *cut = true;
    }
}

/// `s` cut to at most `max` bytes at a character boundary.
fn clip(mut s: String, max: usize, cut: &mut bool) -> String {
    if s.len() > max {
        s.truncate(crate::common::prefix_within(&s, max).len());
        *cut = true;
    }
    s
}

fn attr<'a>(block: &'a Block, key: &str) -> Option<&'a Expression> {
    block
        .body()
        .attributes()
        .find(|a| a.key() == key)
        .map(|a| a.expr())
}

/// A string attribute's text (an expression that is not a plain string: as written).
fn text_attr(block: &Block, key: &str, cut: &mut bool) -> String {
    let text = match attr(block, key) {
        None => String::new(),
        Some(Expression::String(s)) => s.clone(),
        Some(e) => e.to_string(),
    };
    clip(text, MAX_TEXT_BYTES, cut)
}

fn bool_attr(block: &Block, key: &str) -> bool {
    matches!(attr(block, key), Some(Expression::Bool(true)))
}

fn input(name: &str, block: &Block, cut: &mut bool) -> Input {
    let default = attr(block, "default");
    Input {
        name: name.to_owned(),
        r#type: attr(block, "type")
            .map(|t| t.to_string())
            .unwrap_or_default(),
        description: text_attr(block, "description", cut),
        default: default
            .map(|d| clip(default_json(d), MAX_TEXT_BYTES, cut))
            .unwrap_or_default(),
        required: default.is_none(),
        sensitive: bool_attr(block, "sensitive"),
    }
}

/// A default as the registry shows it: the value as JSON when it is a literal, else the
/// expression as written.
fn default_json(e: &Expression) -> String {
    fn literal(e: &Expression) -> Option<Value> {
        Some(match e {
            Expression::Null => Value::Null,
            Expression::Bool(b) => json!(b),
            Expression::Number(n) => serde_json::to_value(n).ok()?,
            Expression::String(s) => json!(s),
            Expression::Array(items) => {
                Value::Array(items.iter().map(literal).collect::<Option<_>>()?)
            }
            Expression::Object(o) => {
                let mut map = serde_json::Map::new();
                for (k, v) in o {
                    map.insert(k.to_string().trim_matches('"').to_owned(), literal(v)?);
                }
                Value::Object(map)
            }
            Expression::Parenthesis(inner) => literal(inner)?,
            _ => return None,
        })
    }
    literal(e).map_or_else(|| e.to_string(), |v| v.to_string())
}

/// The provider a resource or data source of type `kind` uses: its `provider` argument's
/// name, else the type's prefix (`aws` of `aws_instance`).
fn provider_of(kind: &str, block: &Block) -> String {
    if let Some(Expression::Traversal(t)) = attr(block, "provider")
        && let hcl::expr::Expression::Variable(v) = &t.expr
    {
        return v.as_str().to_owned();
    }
    if let Some(Expression::Variable(v)) = attr(block, "provider") {
        return v.as_str().to_owned();
    }
    kind.split('_').next().unwrap_or(kind).to_owned()
}

/// A `required_providers` entry (`{ source = "ns/name", version = "…" }`, or the old
/// version string); undeclared providers are `hashicorp/NAME`, as the engine assumes.
fn required_provider(name: &str, e: &Expression) -> ProviderDependency {
    let (mut source, mut version) = (String::new(), String::new());
    match e {
        Expression::String(v) => version = v.clone(),
        Expression::Object(o) => {
            for (k, v) in o {
                let value = match v {
                    Expression::String(s) => s.clone(),
                    other => other.to_string(),
                };
                match k.to_string().trim_matches('"') {
                    "source" => source = value,
                    "version" => version = value,
                    _ => {}
                }
            }
        }
        _ => {}
    }
    if source.is_empty() {
        source = format!("hashicorp/{name}");
    }
    // `registry.terraform.io/hashicorp/aws` → namespace `hashicorp`.
    let parts: Vec<&str> = source.split('/').collect();
    let namespace = parts
        .len()
        .checked_sub(2)
        .and_then(|i| parts.get(i))
        .copied()
        .unwrap_or_default()
        .to_owned();
    ProviderDependency {
        name: name.to_owned(),
        namespace,
        source,
        version,
    }
}

/// A module's description in the Module Registry Protocol's shape (`root`, each of
/// `submodules` and `examples`).
pub fn protocol_json(m: &ModuleDescription) -> Value {
    json!({
        "path": m.path,
        "name": m.name,
        "readme": m.readme,
        "empty": m.empty,
        "inputs": m.inputs.iter().map(|i| json!({
            "name": i.name,
            "type": i.r#type,
            "description": i.description,
            "default": i.default,
            "required": i.required,
        })).collect::<Vec<_>>(),
        "outputs": m.outputs.iter().map(|o| json!({
            "name": o.name,
            "description": o.description,
        })).collect::<Vec<_>>(),
        "dependencies": m.dependencies.iter().map(|d| json!({
            "name": d.name, "source": d.source, "version": d.version,
        })).collect::<Vec<_>>(),
        "provider_dependencies": providers_json(m),
        "resources": m.resources.iter().map(|r| json!({
            "name": r.name, "type": r.r#type,
        })).collect::<Vec<_>>(),
    })
}

/// A module's providers in the protocol's shape (also the version list's `providers`).
pub fn providers_json(m: &ModuleDescription) -> Vec<Value> {
    m.provider_dependencies
        .iter()
        .map(|p| {
            json!({
                "name": p.name, "namespace": p.namespace, "source": p.source, "version": p.version,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn files(list: &[(&str, &str)]) -> BTreeMap<PathBuf, Vec<u8>> {
        list.iter()
            .map(|(p, c)| (PathBuf::from(p), c.as_bytes().to_vec()))
            .collect()
    }

    const MAIN: &str = r#"
terraform {
  required_providers {
    aws = { source = "hashicorp/aws", version = "~> 5.0" }
    random = ">= 3.0"
  }
}

variable "region" {
  type        = string
  description = "Where the VPC lives."
  default     = "eu-west-1"
}

variable "cidr" {
  type = string
}

variable "tags" {
  type      = map(string)
  default   = { team = "platform" }
  sensitive = true
}

resource "aws_vpc" "this" {
  cidr_block = var.cidr
}

resource "terraform_data" "marker" {}

data "google_client_config" "current" {}

module "subnets" {
  source  = "./modules/subnets"
}

output "vpc_id" {
  description = "The VPC's ID."
  value       = aws_vpc.this.id
}
"#;

    #[test]
    fn the_root_its_submodules_and_examples_are_described() {
        let doc = describe(&files(&[
            ("main.tf", MAIN),
            ("README.md", "# vpc\n"),
            (
                "modules/subnets/main.tf",
                "variable \"count_of\" {\n default = 3\n}\n",
            ),
            (
                "examples/basic/main.tf",
                "module \"vpc\" {\n source = \"../..\"\n}\n",
            ),
            ("tests/ignored.tf", "this is { not HCL"),
        ]))
        .unwrap();
        let root = &doc.root;
        assert_eq!(root.readme, "# vpc\n");
        assert!(!root.empty);
        let names: Vec<&str> = root.inputs.iter().map(|i| i.name.as_str()).collect();
        assert_eq!(names, ["cidr", "region", "tags"]);
        let region = &root.inputs[1];
        assert_eq!(region.r#type, "string");
        assert_eq!(region.description, "Where the VPC lives.");
        assert_eq!(region.default, "\"eu-west-1\"");
        assert!(!region.required);
        assert!(root.inputs[0].required);
        assert_eq!(root.inputs[0].default, "");
        assert_eq!(root.inputs[2].default, r#"{"team":"platform"}"#);
        assert!(root.inputs[2].sensitive);
        assert_eq!(root.inputs[2].r#type, "map(string)");
        assert_eq!(root.outputs[0].name, "vpc_id");
        assert_eq!(root.outputs[0].description, "The VPC's ID.");
        assert_eq!(
            root.resources,
            [
                Resource {
                    name: "this".into(),
                    r#type: "aws_vpc".into()
                },
                Resource {
                    name: "marker".into(),
                    r#type: "terraform_data".into()
                },
            ]
        );
        let providers: Vec<(&str, &str, &str)> = root
            .provider_dependencies
            .iter()
            .map(|p| (p.name.as_str(), p.source.as_str(), p.version.as_str()))
            .collect();
        assert_eq!(
            providers,
            [
                ("aws", "hashicorp/aws", "~> 5.0"),
                ("google", "hashicorp/google", ""),
                ("random", "hashicorp/random", ">= 3.0"),
            ]
        );
        assert_eq!(root.dependencies[0].source, "./modules/subnets");
        assert_eq!(doc.submodules.len(), 1);
        assert_eq!(doc.submodules[0].path, "modules/subnets");
        assert_eq!(doc.submodules[0].name, "subnets");
        assert_eq!(doc.submodules[0].inputs[0].default, "3");
        assert_eq!(doc.examples[0].path, "examples/basic");
        assert_eq!(doc.examples[0].dependencies[0].source, "../..");
        assert!(!doc.truncated);
    }

    #[test]
    fn a_file_that_is_not_hcl_refuses_the_version_and_says_which() {
        let err = describe(&files(&[("main.tf", "variable \"x\" {\n")])).unwrap_err();
        assert!(err.starts_with("main.tf:"), "{err}");
        let err = describe(&files(&[("modules/a/b.tf", "= 1")])).unwrap_err();
        assert!(err.starts_with("modules/a/b.tf:"), "{err}");
    }

    #[test]
    fn only_the_described_directories_are_read() {
        assert!(wanted(Path::new("main.tf")));
        assert!(wanted(Path::new("README.md")));
        assert!(wanted(Path::new("modules/a/x.tf")));
        assert!(wanted(Path::new("examples/b/readme.md")));
        assert!(!wanted(Path::new("tests/x.tf")));
        assert!(!wanted(Path::new("modules/a/deeper/x.tf")));
        assert!(!wanted(Path::new("main.tftest.hcl")));
        assert!(!wanted(Path::new("notes.txt")));
    }

    #[test]
    fn an_archive_without_configuration_is_an_empty_root() {
        let doc = describe(&BTreeMap::new()).unwrap();
        assert!(doc.root.empty);
        assert!(doc.submodules.is_empty());
    }

    #[test]
    fn long_texts_and_lists_are_cut_and_say_so() {
        let many: String = (0..MAX_ITEMS + 3)
            .map(|i| format!("output \"o{i:04}\" {{\n value = 1\n}}\n"))
            .collect();
        let readme = "é".repeat(MAX_README_BYTES);
        let doc = describe(&files(&[("main.tf", &many), ("README.md", &readme)])).unwrap();
        assert_eq!(doc.root.outputs.len(), MAX_ITEMS);
        assert!(doc.root.readme.len() <= MAX_README_BYTES);
        assert!(doc.truncated);
    }

    #[test]
    fn the_protocol_shape_is_snake_case() {
        let doc = describe(&files(&[("main.tf", MAIN)])).unwrap();
        let v = protocol_json(&doc.root);
        assert_eq!(v["provider_dependencies"][0]["namespace"], "hashicorp");
        assert_eq!(v["inputs"][1]["default"], "\"eu-west-1\"");
        assert_eq!(v["resources"][0]["type"], "aws_vpc");
        assert!(v.get("providerDependencies").is_none());
    }
}
