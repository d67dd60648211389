//! What a re-read of the manifest directory changed, for its one info line: the files the
//! notifications named, and the objects added, changed and removed (`Kind namespace/name`).
//!
//! Pure.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use super::identity::label;
use crate::cluster::source::Object;

/// One re-read's changes, each list in name order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reload {
    pub files: Vec<String>,
    pub added: Vec<String>,
    pub changed: Vec<String>,
    pub removed: Vec<String>,
}

impl Reload {
    /// The objects of `before` and `after` compared by identity, and the file names of
    /// `touched`.
    pub fn of(touched: &BTreeSet<PathBuf>, before: &[Object], after: &[Object]) -> Reload {
        let by_label = |objects: &[Object]| -> BTreeMap<String, usize> {
            objects
                .iter()
                .enumerate()
                .map(|(i, o)| (label(o), i))
                .collect()
        };
        let (old, new) = (by_label(before), by_label(after));
        let mut reload = Reload {
            files: touched
                .iter()
                .map(|p| {
                    p.file_name().map_or_else(
                        || p.display().to_string(),
                        |n| n.to_string_lossy().into_owned(),
                    )
                })
                .collect(),
            ..Reload::default()
        };
        for (name, &i) in &new {
            match old.get(name) {
                None => reload.added.push(name.clone()),
                Some(&j) if before[j] != after[i] => reload.changed.push(name.clone()),
                Some(_) => {}
            }
        }
        reload.removed = old
            .keys()
            .filter(|n| !new.contains_key(*n))
            .cloned()
            .collect();
        reload
    }

    /// The line: info, with each list joined by `, ` (empty lists left out).
    pub fn log(&self, dir: &std::path::Path) {
        let join = |v: &[String]| (!v.is_empty()).then(|| v.join(", "));
        tracing::info!(
            dir = %dir.display(),
            files = join(&self.files).as_deref(),
            added = join(&self.added).as_deref(),
            changed = join(&self.changed).as_deref(),
            removed = join(&self.removed).as_deref(),
            "manifests reloaded"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::service;

    fn svc(name: &str, ip: &str) -> Object {
        service("demo", name, ip, &[("http", 80, "TCP")]).into()
    }

    #[test]
    fn objects_are_named_added_changed_and_removed() {
        let before = [
            svc("web", "10.96.0.10"),
            svc("old", "10.96.0.11"),
            svc("same", "10.96.0.12"),
        ];
        let after = [
            svc("same", "10.96.0.12"),
            svc("web", "10.96.0.20"),
            svc("new", "10.96.0.13"),
        ];
        let touched = BTreeSet::from([PathBuf::from("/m/web.yaml"), PathBuf::from("/m/a.yaml")]);
        assert_eq!(
            Reload::of(&touched, &before, &after),
            Reload {
                files: vec!["a.yaml".into(), "web.yaml".into()],
                added: vec!["Service demo/new".into()],
                changed: vec!["Service demo/web".into()],
                removed: vec!["Service demo/old".into()],
            }
        );
    }
}
