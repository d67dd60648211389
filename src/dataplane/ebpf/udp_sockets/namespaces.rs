//! The network namespaces a node's sockets live in: the proxy's own, every process's
//! (`/proc/PID/ns/net`, which covers each pod through its processes, the pause container's at
//! least) and every namespace bound under `/run/netns` (where CNI plugins and `ip netns` keep
//! them, also when no process holds them). One path per namespace, the proxy's own first.
//!
//! A DaemonSet proxy sees the node's processes only with `hostPID: true`, and `/run/netns`
//! only when it is mounted; without either it still reaches its own (the node's) namespace.

use std::collections::BTreeSet;
use std::os::unix::fs::MetadataExt as _;

/// Paths to one file of each distinct network namespace, deduplicated by the namespace's
/// inode. A process that exits while this runs is skipped.
pub fn network_namespaces() -> Vec<String> {
    let mut seen = BTreeSet::new();
    let mut paths = Vec::new();
    let mut add = |path: String| {
        if let Ok(meta) = std::fs::metadata(&path)
            && seen.insert((meta.dev(), meta.ino()))
        {
            paths.push(path);
        }
    };
    add("/proc/self/ns/net".to_owned());
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(pid) = name
                .to_str()
                .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
            else {
                continue;
            };
            add(format!("/proc/{pid}/ns/net"));
        }
    }
    if let Ok(entries) = std::fs::read_dir("/run/netns") {
        for entry in entries.flatten() {
            add(entry.path().to_string_lossy().into_owned());
        }
    }
    paths
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_own_namespace_comes_first_and_once() {
        let all = network_namespaces();
        assert_eq!(all.first().map(String::as_str), Some("/proc/self/ns/net"));
        let own = std::fs::metadata("/proc/self/ns/net").unwrap().ino();
        let same = all
            .iter()
            .filter(|p| std::fs::metadata(p).is_ok_and(|m| m.ino() == own))
            .count();
        assert_eq!(same, 1, "{all:?}");
    }
}
