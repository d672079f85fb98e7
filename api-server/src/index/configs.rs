//! Configuration versions and variables by workspace ([`super::by_workspace`]), kept in
//! step with their watches: a workspace's render reads its
//! `current-configuration-version` (its newest uploaded version that is not provisional)
//! and its `vars` from these instead of going over the organization's objects.

use std::sync::Arc;

use kube::ResourceExt;
use terrace_crds::{ConfigurationVersion, WorkspaceVariable};

use super::by_workspace::WorkspaceKey;
use super::{Inner, uid};

/// The workspace a configuration version belongs to (none: a module's).
fn workspace_of_cv(c: &ConfigurationVersion) -> Option<WorkspaceKey> {
    Some((c.namespace().unwrap_or_default(), c.spec.workspace.clone()?))
}

fn workspace_of_var(v: &WorkspaceVariable) -> WorkspaceKey {
    (v.namespace().unwrap_or_default(), v.spec.workspace.clone())
}

/// Whether a configuration version may be the one a run without a configuration uses:
/// uploaded, and not provisional (a provisional version never becomes current, TFE's
/// rule).
pub fn may_be_current(c: &ConfigurationVersion) -> bool {
    !c.spec.provisional && c.usable()
}

/// Whether a configuration version may be the one the workspace shows as its
/// `current-configuration-version`: not provisional, and pending or uploaded (TFE makes a
/// version current when it is created, before its upload; go-tfe reads it so).
pub fn may_be_shown(c: &ConfigurationVersion) -> bool {
    use terrace_crds::resources::{ConfigurationData, ConfigurationVersionState as S};
    !c.spec.provisional
        && matches!(c.state(), Ok(S::Pending | S::Uploaded))
        && c.data() == ConfigurationData::Kept
}

impl Inner {
    pub(super) fn put_cv(&mut self, c: ConfigurationVersion) {
        let key = uid(&c);
        self.remove_cv(&key);
        let wk = workspace_of_cv(&c);
        if let Some(wk) = &wk {
            self.cv_by_workspace.add(wk.clone(), key);
        }
        self.configuration_versions.put(c);
        if let Some(wk) = &wk {
            self.refresh_current_cv(wk);
        }
    }

    pub(super) fn remove_cv(&mut self, key: &str) {
        let Some(old) = self.configuration_versions.by_uid(key).cloned() else {
            return;
        };
        self.configuration_versions.remove(key);
        if let Some(wk) = workspace_of_cv(&old) {
            self.cv_by_workspace.remove(&wk, key);
            self.refresh_current_cv(&wk);
        }
    }

    pub(super) fn clear_cvs(&mut self) {
        self.configuration_versions.clear();
        self.cv_by_workspace = Default::default();
        self.cv_newest.clear();
    }

    /// Recomputes the current configuration version of workspace `wk`: its last uploaded
    /// (upload time in milliseconds, then creation time, then name) that
    /// [`may_be_current`].
    fn refresh_current_cv(&mut self, wk: &WorkspaceKey) {
        let current = self
            .configuration_versions_of(&wk.0, &wk.1)
            .filter(|c| may_be_current(c))
            .max_by(|a, b| {
                let uploaded = |c: &ConfigurationVersion| {
                    c.status.as_ref().and_then(|s| s.uploaded_at.clone())
                };
                uploaded(a)
                    .cmp(&uploaded(b))
                    .then_with(|| crate::render::by_creation(a.as_ref(), b.as_ref()))
            })
            .map(|c| uid(c.as_ref()));
        self.cv_by_workspace.set_current(wk, current);
        let newest = self
            .configuration_versions_of(&wk.0, &wk.1)
            .filter(|c| may_be_shown(c))
            .max_by(|a, b| crate::render::by_creation(a.as_ref(), b.as_ref()))
            .map(|c| uid(c.as_ref()));
        match newest {
            Some(u) => {
                self.cv_newest.insert(wk.clone(), u);
            }
            None => {
                self.cv_newest.remove(wk);
            }
        }
    }

    /// The configuration versions of workspace object `ws` of namespace `ns` (any order).
    pub fn configuration_versions_of<'a>(
        &'a self,
        ns: &str,
        ws: &str,
    ) -> impl Iterator<Item = &'a Arc<ConfigurationVersion>> + 'a {
        self.cv_by_workspace
            .uids(ns, ws)
            .filter_map(|u| self.configuration_versions.by_uid(u))
    }

    /// The current configuration version of workspace object `ws` of namespace `ns`.
    pub fn current_configuration_version(
        &self,
        ns: &str,
        ws: &str,
    ) -> Option<&Arc<ConfigurationVersion>> {
        self.cv_by_workspace
            .current(ns, ws)
            .and_then(|u| self.configuration_versions.by_uid(u))
    }

    /// The configuration version workspace object `ws` of namespace `ns` shows as its
    /// `current-configuration-version`: its newest that is not provisional, uploaded or
    /// not ([`may_be_shown`]).
    pub fn newest_configuration_version(
        &self,
        ns: &str,
        ws: &str,
    ) -> Option<&Arc<ConfigurationVersion>> {
        self.cv_newest
            .get(&(ns.to_owned(), ws.to_owned()))
            .and_then(|u| self.configuration_versions.by_uid(u))
    }

    pub(super) fn put_var(&mut self, v: WorkspaceVariable) {
        let key = uid(&v);
        self.remove_var(&key);
        self.vars_by_workspace.add(workspace_of_var(&v), key);
        self.workspace_variables.put(v);
    }

    pub(super) fn remove_var(&mut self, key: &str) {
        let Some(old) = self.workspace_variables.by_uid(key).cloned() else {
            return;
        };
        self.workspace_variables.remove(key);
        self.vars_by_workspace.remove(&workspace_of_var(&old), key);
    }

    pub(super) fn clear_vars(&mut self) {
        self.workspace_variables.clear();
        self.vars_by_workspace = Default::default();
    }

    /// The variables of workspace object `ws` of namespace `ns` (any order).
    pub fn variables_of<'a>(
        &'a self,
        ns: &str,
        ws: &str,
    ) -> impl Iterator<Item = &'a Arc<WorkspaceVariable>> + 'a {
        self.vars_by_workspace
            .uids(ns, ws)
            .filter_map(|u| self.workspace_variables.by_uid(u))
    }
}

#[cfg(test)]
mod tests {
    use kube::api::ObjectMeta;
    use terrace_crds::{
        ConfigurationVersion, ConfigurationVersionSpec, ConfigurationVersionStatus,
    };

    use super::Inner;

    fn cv(
        name: &str,
        ws: &str,
        created: &str,
        uploaded: bool,
        provisional: bool,
    ) -> ConfigurationVersion {
        let mut c = ConfigurationVersion::new(
            name,
            ConfigurationVersionSpec {
                ingress_attributes: None,
                workspace: Some(ws.into()),
                provisional,
                ..Default::default()
            },
        );
        c.metadata = ObjectMeta {
            name: Some(name.into()),
            namespace: Some("org".into()),
            uid: Some(format!("uid-{name}")),
            creation_timestamp: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                created.parse().unwrap_or_else(|e| panic!("{e}")),
            )),
            ..Default::default()
        };
        if uploaded {
            c.status = Some(ConfigurationVersionStatus {
                status: Some("uploaded".into()),
                ..Default::default()
            });
        }
        c
    }

    fn current(i: &Inner, ws: &str) -> Option<String> {
        i.current_configuration_version("org", ws)
            .map(|c| c.metadata.name.clone().unwrap_or_default())
    }

    #[test]
    fn the_current_configuration_is_the_newest_uploaded_that_is_not_provisional() {
        let mut i = Inner::default();
        i.put_cv(cv("c1", "a", "2026-01-01T00:00:01Z", true, false));
        i.put_cv(cv("c2", "a", "2026-01-01T00:00:02Z", true, true));
        i.put_cv(cv("c3", "a", "2026-01-01T00:00:03Z", false, false));
        assert_eq!(current(&i, "a").as_deref(), Some("c1"));
        // Uploaded: it becomes current.
        i.put_cv(cv("c3", "a", "2026-01-01T00:00:03Z", true, false));
        assert_eq!(current(&i, "a").as_deref(), Some("c3"));
        i.remove_cv("uid-c3");
        assert_eq!(current(&i, "a").as_deref(), Some("c1"));
        assert_eq!(i.configuration_versions_of("org", "a").count(), 2);
        i.clear_cvs();
        assert_eq!(current(&i, "a"), None);
    }

    fn shown(i: &Inner, ws: &str) -> Option<String> {
        i.newest_configuration_version("org", ws)
            .map(|c| c.metadata.name.clone().unwrap_or_default())
    }

    /// What the workspace shows as `current-configuration-version`: its newest version
    /// that is not provisional, uploaded or not (go-tfe creates a pending one, then a
    /// provisional one, and expects the pending one; issue 42 §3).
    #[test]
    fn the_shown_configuration_is_the_newest_that_is_not_provisional() {
        let mut i = Inner::default();
        i.put_cv(cv("c1", "a", "2026-01-01T00:00:01Z", true, false));
        assert_eq!(shown(&i, "a").as_deref(), Some("c1"));
        i.put_cv(cv("c2", "a", "2026-01-01T00:00:02Z", false, false));
        i.put_cv(cv("c3", "a", "2026-01-01T00:00:03Z", false, true));
        assert_eq!(shown(&i, "a").as_deref(), Some("c2"));
        // A run without a configuration still takes the newest uploaded.
        assert_eq!(current(&i, "a").as_deref(), Some("c1"));
        let mut errored = cv("c2", "a", "2026-01-01T00:00:02Z", false, false);
        errored.status = Some(ConfigurationVersionStatus {
            status: Some("errored".into()),
            ..Default::default()
        });
        i.put_cv(errored);
        assert_eq!(shown(&i, "a").as_deref(), Some("c1"));
        i.remove_cv("uid-c1");
        assert_eq!(shown(&i, "a"), None);
    }
}
