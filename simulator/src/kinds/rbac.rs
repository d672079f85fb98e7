//! Role, RoleBinding, ClusterRole and ClusterRoleBinding: names are path segments
//! (`system:controller:foo` is valid), as RBAC's validation allows.

use super::KindBehaviour;

/// The four RBAC kinds.
pub struct Rbac;

impl KindBehaviour for Rbac {
    fn validate_name(&self, name: &str) -> Option<String> {
        crate::meta::validate_path_segment_name(name)
    }
}
