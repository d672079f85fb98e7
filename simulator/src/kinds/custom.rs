//! Custom resources (kinds registered by CRDs), as `customResourceStrategy` treats them:
//! `generation` is maintained, the CRD's structural schema defaults, prunes and validates
//! every write (CEL rules included), a status subresource's `.status` is dropped on
//! create, an update must name its resourceVersion, and strategic merge patch is 415.

use super::{KindBehaviour, WriteRules};
use crate::resource::ResourceInfo;
use crate::status::qualified;
use crate::status::{ApiError, ApiResult};
use serde_json::Value;

/// Every kind a CRD registers.
pub struct CustomResources;

impl KindBehaviour for CustomResources {
    fn write_rules(&self) -> WriteRules {
        WriteRules {
            tracks_generation: true,
            unconditional_update: false,
            strategic_merge: false,
        }
    }

    fn prepare_for_create(&self, info: &ResourceInfo, obj: &mut Value, _: &str) -> ApiResult<()> {
        if info.status_subresource
            && let Some(m) = obj.as_object_mut()
        {
            m.remove("status");
        }
        Ok(())
    }

    /// Defaults → prune → validate with the version's schema; the pruned field paths
    /// are answered for `fieldValidation`, failures as one 422 with every cause.
    fn validate(
        &self,
        info: &ResourceInfo,
        obj: &mut Value,
        old: Option<&Value>,
        name: &str,
    ) -> ApiResult<Vec<String>> {
        let Some(schema) = &info.schema else {
            return Ok(Vec::new());
        };
        let structural = crate::schema::Structural::from_crd_schema(schema)
            .map_err(|e| ApiError::internal(format!("invalid schema for {}: {e}", info.kind)))?;
        structural.apply_defaults(obj);
        let pruned = structural.prune(obj);
        let errors = structural.validate(obj, old);
        if !errors.is_empty() {
            let causes: Vec<(String, String, String)> = errors
                .into_iter()
                .map(|e| (e.field, e.reason.to_string(), e.message))
                .collect();
            return Err(ApiError::invalid(&qualified(info), name, &causes));
        }
        Ok(pruned)
    }
}
