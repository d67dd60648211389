//! What the eBPF mode needs of the lab: a cgroup v2 per node and a pin root per node.
//!
//! Socket load balancing works per cgroup, not per network namespace: the programs of a
//! node's proxy see only the sockets of processes in the cgroup it attached them to. So every
//! node gets its own cgroup (`<cgroup v2 root>/kprs-lab-<pid>-<lab>-n<k>`), its proxy is
//! started with `--bpf-cgroup` naming it, and every client process of that node (probes from
//! its pods and from the node itself) joins it before it opens a socket ([`SocketLb::join`]).
//! The external client joins none: what it sends reaches a node as packets, which only the tc
//! programs (not built yet) could balance.
//!
//! Pins: one private bpffs instance per lab on a scratch directory, with a pin root per node
//! in it (`--bpf-pin-root`), so three proxies on one kernel never share a map.
//!
//! Cleanup, on drop (also while a test panics; the lab drops this after its proxies): the
//! bpffs is unmounted, which drops every pin and so detaches every link once no proxy holds
//! it; then each cgroup's remaining processes (probes a cancelled scenario left running: all
//! started by the lab) are killed by pid, and the empty cgroup is removed.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use kube_proxy_rs::dataplane::ebpf::backend::default_cgroup;

use crate::testenv::scratch_dir;

/// A node's cgroup, emptied and removed on drop.
struct NodeCgroup(PathBuf);

impl NodeCgroup {
    fn create(path: PathBuf) -> NodeCgroup {
        std::fs::create_dir(&path)
            .unwrap_or_else(|e| panic!("create cgroup {}: {e}", path.display()));
        NodeCgroup(path)
    }

    fn pids(&self) -> Vec<i32> {
        std::fs::read_to_string(self.0.join("cgroup.procs"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    }
}

impl Drop for NodeCgroup {
    fn drop(&mut self) {
        // Only the lab's own probes can be here: each is killed by its pid.
        for _ in 0..50 {
            let pids = self.pids();
            if pids.is_empty() {
                break;
            }
            for pid in pids {
                let _ = Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .status();
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        if let Err(e) = std::fs::remove_dir(&self.0) {
            eprintln!("cannot remove cgroup {}: {e}", self.0.display());
        }
    }
}

/// A bpffs instance mounted on a scratch directory, unmounted on drop.
struct BpfFs(PathBuf);

impl BpfFs {
    fn mount(dir: PathBuf) -> BpfFs {
        std::fs::create_dir_all(&dir).expect("create the bpffs mount point");
        let status = Command::new("mount")
            .args(["-t", "bpf", "bpf"])
            .arg(&dir)
            .status()
            .expect("run mount");
        assert!(
            status.success(),
            "mount bpffs on {}: {status}",
            dir.display()
        );
        BpfFs(dir)
    }
}

impl Drop for BpfFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// The lab's cgroups and pins for the eBPF mode. Field order is drop order: pins first (links
/// detached), then the cgroups.
pub struct SocketLb {
    bpffs: BpfFs,
    cgroups: Vec<NodeCgroup>,
}

impl SocketLb {
    /// Creates a cgroup per node and mounts the lab's bpffs; `prefix` is the lab's.
    pub fn create(prefix: &str, nodes: usize) -> SocketLb {
        let name = format!("kprs-lab-{}-{prefix}", std::process::id());
        let bpffs = BpfFs::mount(scratch_dir().join(format!("{prefix}-bpffs")));
        let root = default_cgroup();
        let cgroups = (1..=nodes)
            .map(|k| NodeCgroup::create(root.join(format!("{name}-n{k}"))))
            .collect();
        SocketLb { bpffs, cgroups }
    }

    /// The cgroup of node `index`.
    pub fn cgroup(&self, index: usize) -> &Path {
        &self.cgroups[index].0
    }

    /// Where node `index`'s proxy pins its maps and links.
    pub fn pin_root(&self, index: usize) -> PathBuf {
        self.bpffs.0.join(format!("n{}", index + 1))
    }

    /// The flags that give node `index`'s proxy its cgroup and pin root.
    pub fn proxy_flags(&self, index: usize) -> Vec<String> {
        vec![
            format!("--bpf-cgroup={}", self.cgroup(index).display()),
            format!("--bpf-pin-root={}", self.pin_root(index).display()),
        ]
    }

    /// The frontends (address, port) node `index`'s proxy has in its pinned `kp_svc` map: what
    /// its programs translate.
    pub fn frontends(&self, index: usize) -> Result<BTreeSet<SocketAddr>, String> {
        use kube_proxy_rs::dataplane::ebpf::{layout, names};
        let path = names::pin_dir(&self.pin_root(index)).join(names::MAP_SVC);
        let data = aya::maps::MapData::from_pin(&path)
            .map_err(|e| format!("open {}: {e}", path.display()))?;
        let map: aya::maps::HashMap<_, layout::SvcKey, layout::SvcVal> =
            aya::maps::HashMap::try_from(aya::maps::Map::HashMap(data))
                .map_err(|e| format!("{}: {e}", path.display()))?;
        map.keys()
            .map(|k| {
                k.map(|k| SocketAddr::new(k.ip(), k.port()))
                    .map_err(|e| format!("read {}: {e}", path.display()))
            })
            .collect()
    }

    /// `cmd` run so that it joins node `index`'s cgroup before it starts (a shell writes its
    /// own pid to `cgroup.procs`, then execs `cmd`), so every socket it opens is balanced by
    /// that node's programs. Membership survives `ip netns exec`'s remount of /sys.
    pub fn join(&self, index: usize, cmd: &Command) -> Command {
        let mut joined = Command::new("sh");
        joined
            .arg("-c")
            .arg(r#"echo $$ > "$1/cgroup.procs" || exit 97; shift; exec "$@""#)
            .arg("sh")
            .arg(self.cgroup(index))
            .arg(cmd.get_program())
            .args(cmd.get_args());
        for (k, v) in cmd.get_envs() {
            match v {
                Some(v) => joined.env(k, v),
                None => joined.env_remove(k),
            };
        }
        joined
    }
}
