//! `terraform-provider-files`: a provider for terrace's end-to-end tests whose real
//! objects a test can change behind the engine's back (issue 44, docs/health.md).
//!
//! ```hcl
//! provider "files" { root = "/some/dir" }
//! resource "files_object" "config" {
//!   name    = "config.json"        # the file root/config.json (replaced when it changes)
//!   content = "hello"
//!   tags    = { team = "infra" }   # optional
//! }
//! ```
//!
//! The file holds `{"content": …, "tags": {…}}`. A refresh reads it back, so editing
//! the file is drift of `content` or `tags`, and deleting it is drift too (the object is
//! gone).

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use anyhow::Result;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tf_provider::schema::{
    Attribute, AttributeConstraint, AttributeType, Block, Description, Schema,
};
use tf_provider::value::{Value, ValueEmpty, ValueMap, ValueString};
use tf_provider::{
    AttributePath, Diagnostics, DynamicDataSource, DynamicResource, Provider, Resource, map, serve,
};

/// The provider's `root`, set by `configure` and read by every resource call.
type Root = Arc<RwLock<Option<PathBuf>>>;

#[derive(Debug, Clone, Serialize, Deserialize, Default)]
struct ObjectState<'a> {
    #[serde(borrow = "'a")]
    id: ValueString<'a>,
    name: ValueString<'a>,
    content: ValueString<'a>,
    tags: ValueMap<'a, ValueString<'a>>,
}

/// What the file holds: the real object.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Stored {
    content: String,
    #[serde(default)]
    tags: BTreeMap<String, String>,
}

#[derive(Debug, Clone)]
struct Object {
    root: Root,
}

impl Object {
    fn path(&self, diags: &mut Diagnostics, name: &str) -> Option<PathBuf> {
        let root = self.root.read().ok().and_then(|r| r.clone());
        let Some(root) = root else {
            diags.root_error_short("the provider is not configured (no root)");
            return None;
        };
        if name.is_empty() || name.contains('/') || name == ".." || name == "." {
            diags.error_short("name must be a plain file name", AttributePath::new("name"));
            return None;
        }
        Some(root.join(name))
    }

    fn write(&self, diags: &mut Diagnostics, state: &ObjectState<'_>) -> Option<()> {
        let name = state.name.as_deref_option().unwrap_or_default();
        let path = self.path(diags, name)?;
        let stored = Stored {
            content: state
                .content
                .as_deref_option()
                .unwrap_or_default()
                .to_owned(),
            tags: tags_of(&state.tags),
        };
        let body = serde_json::to_vec_pretty(&stored).unwrap_or_default();
        if let Err(e) = std::fs::write(&path, body) {
            diags.root_error(
                "cannot write the object",
                format!("{}: {e}", path.display()),
            );
            return None;
        }
        Some(())
    }
}

fn tags_of(tags: &ValueMap<'_, ValueString<'_>>) -> BTreeMap<String, String> {
    tags.as_ref_option()
        .map(|m| {
            m.iter()
                .map(|(k, v)| {
                    (
                        k.to_string(),
                        v.as_deref_option().unwrap_or_default().to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn string_attr(constraint: AttributeConstraint, about: &str) -> Attribute {
    Attribute {
        attr_type: AttributeType::String,
        description: Description::plain(about.to_owned()),
        constraint,
        ..Default::default()
    }
}

#[async_trait]
impl Resource for Object {
    type State<'a> = ObjectState<'a>;
    type PrivateState<'a> = ValueEmpty;
    type ProviderMetaState<'a> = ValueEmpty;

    fn schema(&self, _diags: &mut Diagnostics) -> Option<Schema> {
        Some(Schema {
            version: 1,
            block: Block {
                version: 1,
                description: Description::plain("A JSON file in the provider's root"),
                attributes: map! {
                    "id" => string_attr(AttributeConstraint::Computed, "The file's name"),
                    "name" => string_attr(AttributeConstraint::Required, "The file's name in root"),
                    "content" => string_attr(AttributeConstraint::Required, "The object's content"),
                    "tags" => Attribute {
                        attr_type: AttributeType::Map(AttributeType::String.into()),
                        description: Description::plain("The object's tags"),
                        constraint: AttributeConstraint::Optional,
                        ..Default::default()
                    },
                },
                ..Default::default()
            },
        })
    }

    async fn read<'a>(
        &self,
        diags: &mut Diagnostics,
        state: Self::State<'a>,
        private_state: Self::PrivateState<'a>,
        _meta: Self::ProviderMetaState<'a>,
    ) -> Option<(Self::State<'a>, Self::PrivateState<'a>)> {
        let name = state.name.as_deref_option().unwrap_or_default().to_owned();
        let path = self.path(diags, &name)?;
        // Gone behind the engine's back: the object no longer exists.
        let bytes = std::fs::read(&path).ok()?;
        let Ok(stored) = serde_json::from_slice::<Stored>(&bytes) else {
            diags.root_error_short(format!("{} is not an object's JSON", path.display()));
            return Some((state, private_state));
        };
        let mut state = state;
        state.content = ValueString::from(Cow::Owned(stored.content));
        // No tags in the file and none in the state: keep the state's null.
        if !(stored.tags.is_empty() && state.tags.is_null()) {
            state.tags = Value::Value(
                stored
                    .tags
                    .into_iter()
                    .map(|(k, v)| (Cow::Owned(k), ValueString::from(Cow::Owned(v))))
                    .collect(),
            );
        }
        Some((state, private_state))
    }

    async fn plan_create<'a>(
        &self,
        _diags: &mut Diagnostics,
        proposed: Self::State<'a>,
        _config: Self::State<'a>,
        _meta: Self::ProviderMetaState<'a>,
    ) -> Option<(Self::State<'a>, Self::PrivateState<'a>)> {
        let mut state = proposed;
        state.id = ValueString::Unknown;
        Some((state, Default::default()))
    }

    async fn plan_update<'a>(
        &self,
        _diags: &mut Diagnostics,
        prior: Self::State<'a>,
        proposed: Self::State<'a>,
        _config: Self::State<'a>,
        prior_private: Self::PrivateState<'a>,
        _meta: Self::ProviderMetaState<'a>,
    ) -> Option<(Self::State<'a>, Self::PrivateState<'a>, Vec<AttributePath>)> {
        let mut replace = Vec::new();
        if proposed.name != prior.name {
            replace.push(AttributePath::new("name"));
        }
        Some((proposed, prior_private, replace))
    }

    async fn plan_destroy<'a>(
        &self,
        _diags: &mut Diagnostics,
        _prior: Self::State<'a>,
        prior_private: Self::PrivateState<'a>,
        _meta: Self::ProviderMetaState<'a>,
    ) -> Option<Self::PrivateState<'a>> {
        Some(prior_private)
    }

    async fn create<'a>(
        &self,
        diags: &mut Diagnostics,
        planned: Self::State<'a>,
        _config: Self::State<'a>,
        private: Self::PrivateState<'a>,
        _meta: Self::ProviderMetaState<'a>,
    ) -> Option<(Self::State<'a>, Self::PrivateState<'a>)> {
        self.write(diags, &planned)?;
        let mut state = planned;
        state.id = state.name.clone();
        Some((state, private))
    }

    async fn update<'a>(
        &self,
        diags: &mut Diagnostics,
        _prior: Self::State<'a>,
        planned: Self::State<'a>,
        _config: Self::State<'a>,
        private: Self::PrivateState<'a>,
        _meta: Self::ProviderMetaState<'a>,
    ) -> Option<(Self::State<'a>, Self::PrivateState<'a>)> {
        self.write(diags, &planned)?;
        Some((planned, private))
    }

    async fn destroy<'a>(
        &self,
        diags: &mut Diagnostics,
        state: Self::State<'a>,
        _private: Self::PrivateState<'a>,
        _meta: Self::ProviderMetaState<'a>,
    ) -> Option<()> {
        let name = state.name.as_deref_option().unwrap_or_default().to_owned();
        let path = self.path(diags, &name)?;
        match std::fs::remove_file(&path) {
            Ok(()) => Some(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Some(()),
            Err(e) => {
                diags.root_error(
                    "cannot delete the object",
                    format!("{}: {e}", path.display()),
                );
                None
            }
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, Default)]
struct FilesConfig<'a> {
    #[serde(borrow = "'a")]
    root: ValueString<'a>,
}

#[derive(Debug, Default, Clone)]
struct Files {
    root: Root,
}

#[async_trait]
impl Provider for Files {
    type Config<'a> = FilesConfig<'a>;
    type MetaState<'a> = ValueEmpty;

    fn schema(&self, _diags: &mut Diagnostics) -> Option<Schema> {
        Some(Schema {
            version: 1,
            block: Block {
                description: Description::plain("Objects as JSON files in a directory"),
                attributes: map! {
                    "root" => string_attr(AttributeConstraint::Required, "The objects' directory"),
                },
                ..Default::default()
            },
        })
    }

    async fn validate<'a>(
        &self,
        _diags: &mut Diagnostics,
        _config: Self::Config<'a>,
    ) -> Option<()> {
        Some(())
    }

    async fn configure<'a>(
        &self,
        diags: &mut Diagnostics,
        _terraform_version: String,
        config: Self::Config<'a>,
    ) -> Option<()> {
        let root = PathBuf::from(config.root.as_deref_option().unwrap_or_default());
        if !root.is_dir() {
            diags.root_error_short(format!("root {} is not a directory", root.display()));
            return None;
        }
        if let Ok(mut r) = self.root.write() {
            *r = Some(root);
        }
        Some(())
    }

    fn get_resources(
        &self,
        _diags: &mut Diagnostics,
    ) -> Option<HashMap<String, Box<dyn DynamicResource>>> {
        Some(map! {
            "object" => Object { root: self.root.clone() },
        })
    }

    fn get_data_sources(
        &self,
        _diags: &mut Diagnostics,
    ) -> Option<HashMap<String, Box<dyn DynamicDataSource>>> {
        Some(map! {})
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<()> {
    serve("files", Files::default()).await
}
