//! The eBPF mode's kernel I/O: loading and attaching the programs, pinning, and reading and
//! writing the two maps the proxy owns.
//!
//! [`Kernel::open`] loads the object embedded at build time (`bpf/kp_sock.c`), creating the
//! maps under the pin directory or reusing the ones pinned there (after checking their
//! layout: aya 0.14 reuses a pinned map by name without looking at it), attaches every
//! program to the cgroup and pins each link. A link pinned by a previous run is released only
//! after the new one is attached, so sockets are balanced throughout a restart (two programs
//! in a row are harmless: the second sees a backend address, which is no frontend).
//! It also loads the tc programs (`bpf/kp_tc.c`, sharing the maps); [`Kernel::attach_external`]
//! attaches them to the node's interfaces ([`super::tc`]).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use aya::maps::lpm_trie::{Key as LpmKey, LpmTrie};
use aya::maps::{HashMap, MapData, MapError};
use aya::programs::links::{FdLink, PinnedLink};
use aya::programs::{CgroupAttachMode, CgroupSkbAttachType, Program, ProgramError};
use aya::{Ebpf, EbpfLoader};

use super::diff::{Maps, Op};
use super::layout::{
    AffKey, AffVal, Backend as Slot, NpKey, RevKey, RevVal, SlotKey, SrcKey, SvcKey, SvcVal,
};
use super::{names, tc};
use pinned_layouts::{check_pinned_layouts, renew_resized_counters};

mod pinned_layouts;

/// The compiled programs, embedded by build.rs.
pub static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/kp_sock.o"));
/// The compiled tc programs (`bpf/kp_tc.c`).
pub static TC_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/kp_tc.o"));

/// A `kp_src` key after its prefix length, as aya's LPM trie wants it: 36 bytes.
type SrcData = [u32; 9];

/// Where the programs attach and pin.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// A cgroup v2 directory: every socket created by a process in it (or below) is balanced.
    pub cgroup: PathBuf,
    /// The pin root ([`names::PIN_ROOT`] by default); must be on a bpffs.
    pub pin_root: PathBuf,
}

/// Why the eBPF dataplane could not be set up or written.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{what} {path}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot mount bpffs on {path}")]
    Mount {
        path: PathBuf,
        #[source]
        source: nix::Error,
    },
    #[error("cannot load the eBPF object")]
    Load(#[source] aya::EbpfError),
    #[error("program {name}")]
    Program {
        name: &'static str,
        #[source]
        source: ProgramError,
    },
    #[error("pinning {path}")]
    Pin {
        path: PathBuf,
        #[source]
        source: aya::pin::PinError,
    },
    #[error("pinned link {path}")]
    Link {
        path: PathBuf,
        #[source]
        source: aya::programs::links::LinkError,
    },
    #[error("map {name}")]
    Map {
        name: &'static str,
        #[source]
        source: MapError,
    },
    /// A map pinned under our versioned directory has another shape than this build's.
    #[error(
        "pinned map {path} has (key bytes, value bytes, max entries) {pinned:?}, this build wants {wanted:?}: remove it with --cleanup"
    )]
    Layout {
        path: PathBuf,
        pinned: (u32, u32, u32),
        wanted: (u32, u32, u32),
    },
    #[error("program {0} missing from the eBPF object")]
    Missing(&'static str),
}

/// The kernel side of the eBPF mode as the applier uses it.
pub trait Backend: Send {
    /// What the proxy's two maps hold now.
    fn read(&mut self) -> Result<Maps, Error>;
    /// One map write.
    fn write(&mut self, op: &Op) -> Result<(), Error>;
    /// Called at each sync: attaches the tc programs to interfaces that came up since (a new
    /// pod's, before the sync that makes it an endpoint). Nothing without tc.
    fn refresh_external(&mut self) -> Result<(), Error> {
        Ok(())
    }
}

/// The loaded programs' maps, once every program is attached and pinned.
pub struct Kernel {
    svc: HashMap<MapData, SvcKey, SvcVal>,
    slots: HashMap<MapData, SlotKey, Slot>,
    node_ports: HashMap<MapData, NpKey, u8>,
    src: LpmTrie<MapData, SrcData, u8>,
    /// The tc programs, loaded when first attached.
    tc: Ebpf,
    links: PathBuf,
    /// tc attachments that could not be pinned (kernels without TCX).
    unpinned: tc::Unpinned,
    /// The interfaces the tc programs are on, and the network namespace they are in (its
    /// inode); `None` until [`Kernel::attach_external`].
    external: Option<(u64, BTreeSet<tc::Interface>)>,
}

impl Kernel {
    /// Loads, attaches and pins everything (see the module doc); idempotent across restarts.
    pub fn open(settings: &Settings) -> Result<Kernel, Error> {
        ensure_bpffs(&settings.pin_root)?;
        let pin_dir = names::pin_dir(&settings.pin_root);
        let links = names::links_dir(&settings.pin_root);
        fs::create_dir_all(&links).map_err(|source| Error::Io {
            what: "cannot create",
            path: links.clone(),
            source,
        })?;
        renew_resized_counters(&pin_dir)?;
        check_pinned_layouts(&pin_dir)?;
        let mut ebpf = EbpfLoader::new()
            .default_map_pin_directory(&pin_dir)
            .load(OBJECT)
            .map_err(Error::Load)?;
        let cgroup = fs::File::open(&settings.cgroup).map_err(|source| Error::Io {
            what: "cannot open cgroup",
            path: settings.cgroup.clone(),
            source,
        })?;
        for name in names::PROGRAMS {
            attach(&mut ebpf, name, &cgroup, &links)?;
        }
        let svc = take_map(&mut ebpf, names::MAP_SVC)?;
        let slots = take_map(&mut ebpf, names::MAP_SLOT)?;
        let node_ports = take_map(&mut ebpf, names::MAP_NODEPORT)?;
        // The tc object reuses the maps pinned above and adds its own.
        let mut tc = EbpfLoader::new()
            .default_map_pin_directory(&pin_dir)
            .load(TC_OBJECT)
            .map_err(Error::Load)?;
        let name = names::MAP_SRC;
        let map = tc.take_map(name).ok_or(Error::Missing(name))?;
        let src = LpmTrie::try_from(map).map_err(|source| Error::Map { name, source })?;
        Ok(Kernel {
            svc,
            slots,
            node_ports,
            src,
            tc,
            links,
            unpinned: tc::Unpinned::default(),
            external: None,
        })
    }

    /// Attaches the tc programs to `ifaces` (ingress and egress) so traffic from outside the
    /// node is balanced; again for an interface attached before, the link is replaced.
    /// Returns the pinned links' names.
    pub fn attach_external(&mut self, ifaces: &[tc::Interface]) -> Result<Vec<String>, Error> {
        let pins = tc::attach(&mut self.tc, ifaces, &self.links, &mut self.unpinned)?;
        let netns = tc::current_netns()?;
        let (_, attached) = self
            .external
            .get_or_insert_with(|| (netns, BTreeSet::new()));
        attached.extend(ifaces.iter().cloned());
        Ok(pins)
    }
}

fn src_data(k: &SrcKey) -> LpmKey<SrcData> {
    let mut d = [0u32; 9];
    d[..4].copy_from_slice(&k.fe_addr);
    let p = k.fe_port.to_ne_bytes();
    d[4] = u32::from_ne_bytes([p[0], p[1], k.fe_proto, k.pad]);
    d[5..].copy_from_slice(&k.src);
    LpmKey::new(k.prefixlen, d)
}

fn src_key(k: &LpmKey<SrcData>) -> SrcKey {
    let d = k.data();
    let w = d[4].to_ne_bytes();
    SrcKey {
        prefixlen: k.prefix_len(),
        fe_addr: [d[0], d[1], d[2], d[3]],
        fe_port: u16::from_ne_bytes([w[0], w[1]]),
        fe_proto: w[2],
        pad: w[3],
        src: [d[5], d[6], d[7], d[8]],
    }
}

impl Backend for Kernel {
    fn read(&mut self) -> Result<Maps, Error> {
        read_maps(&self.svc, &self.slots, &self.node_ports, Some(&self.src))
    }

    fn write(&mut self, op: &Op) -> Result<(), Error> {
        let (name, result) = match op {
            Op::PutSlot(k, v) => (names::MAP_SLOT, self.slots.insert(k, v, 0)),
            Op::PutSvc(k, v) => (names::MAP_SVC, self.svc.insert(k, v, 0)),
            Op::DelSvc(k) => (names::MAP_SVC, ignore_missing(self.svc.remove(k))),
            Op::DelSlot(k) => (names::MAP_SLOT, ignore_missing(self.slots.remove(k))),
            Op::PutNodePort(k) => (names::MAP_NODEPORT, self.node_ports.insert(k, 1, 0)),
            Op::DelNodePort(k) => (
                names::MAP_NODEPORT,
                ignore_missing(self.node_ports.remove(k)),
            ),
            Op::PutSrc(k) => (
                names::MAP_SRC,
                self.src.insert(&src_data(k), super::diff::src_value(k), 0),
            ),
            Op::DelSrc(k) => (
                names::MAP_SRC,
                ignore_missing(self.src.remove(&src_data(k))),
            ),
        };
        result.map_err(|source| Error::Map { name, source })
    }

    /// Attaches to the node's interfaces not attached yet (in the calling thread's network
    /// namespace, the proxy's); an interface gone keeps nothing (its links went with it).
    fn refresh_external(&mut self) -> Result<(), Error> {
        let Some((netns, attached)) = &self.external else {
            return Ok(());
        };
        // Only in the namespace attached first: a caller on another thread (in another
        // namespace) must not put the programs on that namespace's interfaces.
        if tc::current_netns()? != *netns {
            return Ok(());
        }
        let new: Vec<tc::Interface> = tc::node_interfaces()?
            .into_iter()
            .filter(|i| !attached.contains(i))
            .collect();
        if !new.is_empty() {
            let names: Vec<&str> = new.iter().map(|i| i.name.as_str()).collect();
            tracing::info!(interfaces = %names.join(","), "eBPF tc programs attached");
            self.attach_external(&new)?;
        }
        Ok(())
    }
}

/// What the proxy's maps hold: the applier adopts with it, and `explain` reads with it.
/// `src` (`kp_src`) may be absent from a pin directory a proxy made before the tc programs
/// were added; it is then read as empty.
fn read_maps(
    svc: &HashMap<MapData, SvcKey, SvcVal>,
    slots: &HashMap<MapData, SlotKey, Slot>,
    node_ports: &HashMap<MapData, NpKey, u8>,
    src: Option<&LpmTrie<MapData, SrcData, u8>>,
) -> Result<Maps, Error> {
    let map_err = |name| move |source| Error::Map { name, source };
    let svc = svc
        .iter()
        .collect::<Result<BTreeMap<_, _>, _>>()
        .map_err(map_err(names::MAP_SVC))?;
    let slots = slots
        .iter()
        .collect::<Result<BTreeMap<_, _>, _>>()
        .map_err(map_err(names::MAP_SLOT))?;
    let node_ports = node_ports
        .keys()
        .collect::<Result<_, _>>()
        .map_err(map_err(names::MAP_NODEPORT))?;
    let src = match src {
        Some(src) => src
            .keys()
            .map(|k| k.map(|k| src_key(&k)))
            .collect::<Result<_, _>>()
            .map_err(map_err(names::MAP_SRC))?,
        None => BTreeSet::new(),
    };
    Ok(Maps {
        svc,
        slots,
        node_ports,
        src,
    })
}

/// The maps a proxy pinned under `pin_root`, read as a restarted proxy adopts them, without
/// loading or attaching anything (`explain`, `status`); `None` when no map is pinned there.
/// Their layout is checked first, as at start-up.
pub fn read_pinned(pin_root: &Path) -> Result<Option<Maps>, Error> {
    let pin_dir = names::pin_dir(pin_root);
    if !pin_dir.join(names::MAP_SVC).exists() {
        return Ok(None);
    }
    check_pinned_layouts(&pin_dir)?;
    let svc = open_pinned(&pin_dir, names::MAP_SVC)?;
    let slots = open_pinned(&pin_dir, names::MAP_SLOT)?;
    let node_ports = open_pinned(&pin_dir, names::MAP_NODEPORT)?;
    let src = if pin_dir.join(names::MAP_SRC).exists() {
        let name = names::MAP_SRC;
        let err = |source| Error::Map { name, source };
        let data = MapData::from_pin(pin_dir.join(name)).map_err(err)?;
        Some(LpmTrie::try_from(aya::maps::Map::from_map_data(data).map_err(err)?).map_err(err)?)
    } else {
        None
    };
    read_maps(&svc, &slots, &node_ports, src.as_ref()).map(Some)
}

/// The ClientIP affinity entries (`kp_aff`, filled by the programs) of slot set `svc_id`, one
/// per network namespace that connected to it.
pub fn read_affinity(pin_root: &Path, svc_id: u32) -> Result<Vec<(AffKey, AffVal)>, Error> {
    let name = names::MAP_AFF;
    let map: HashMap<MapData, AffKey, AffVal> = open_pinned(&names::pin_dir(pin_root), name)?;
    let mut out = Vec::new();
    for entry in map.iter() {
        let (k, v) = entry.map_err(|source| Error::Map { name, source })?;
        if k.svc_id == svc_id {
            out.push((k, v));
        }
    }
    Ok(out)
}

/// `kp_rev` as pinned under `pin_root`: which Service address each translated socket asked
/// for, by socket cookie and backend (filled by the programs; read by the UDP socket
/// reconciler, [`super::udp_sockets`]).
pub fn open_reverse(pin_root: &Path) -> Result<HashMap<MapData, RevKey, RevVal>, Error> {
    open_pinned(&names::pin_dir(pin_root), names::MAP_REV)
}

/// The programs without a pinned link under `pin_root`: not attached to the cgroup (a pinned
/// link keeps its program attached; `--cleanup` removes them all).
pub fn unattached(pin_root: &Path) -> Vec<&'static str> {
    let links = names::links_dir(pin_root);
    names::PROGRAMS
        .into_iter()
        .filter(|p| !links.join(p).exists())
        .collect()
}

fn open_pinned<K: aya::Pod, V: aya::Pod>(
    pin_dir: &Path,
    name: &'static str,
) -> Result<HashMap<MapData, K, V>, Error> {
    let err = |source| Error::Map { name, source };
    let data = MapData::from_pin(pin_dir.join(name)).map_err(err)?;
    HashMap::try_from(aya::maps::Map::from_map_data(data).map_err(err)?).map_err(err)
}

/// A delete of what is already gone has done its job.
fn ignore_missing(r: Result<(), MapError>) -> Result<(), MapError> {
    match r {
        Err(MapError::KeyNotFound) => Ok(()),
        Err(MapError::SyscallError(e)) if e.io_error.raw_os_error() == Some(libc_enoent()) => {
            Ok(())
        }
        other => other,
    }
}

const fn libc_enoent() -> i32 {
    2
}

fn take_map<K: aya::Pod, V: aya::Pod>(
    ebpf: &mut Ebpf,
    name: &'static str,
) -> Result<HashMap<MapData, K, V>, Error> {
    let map = ebpf.take_map(name).ok_or(Error::Missing(name))?;
    HashMap::try_from(map).map_err(|source| Error::Map { name, source })
}

/// Loads program `name`, attaches it to `cgroup` and pins its link as `links/<name>`,
/// replacing (and so detaching) a link pinned there before.
fn attach(
    ebpf: &mut Ebpf,
    name: &'static str,
    cgroup: &fs::File,
    links: &Path,
) -> Result<(), Error> {
    let err = |source| Error::Program { name, source };
    let link_err = |source| Error::Link {
        path: links.join(name),
        source,
    };
    // A cgroup link (bpf_link_create, kernel 5.7+) takes no attach flags and always
    // coexists with other links on the cgroup, as BPF_F_ALLOW_MULTI would: `Single` passes 0.
    let mode = CgroupAttachMode::Single;
    let link: FdLink = match ebpf.program_mut(name).ok_or(Error::Missing(name))? {
        Program::CgroupSockAddr(p) => {
            p.load().map_err(err)?;
            let id = p.attach(cgroup, mode).map_err(err)?;
            p.take_link(id).map_err(err)?.try_into().map_err(link_err)?
        }
        Program::CgroupSock(p) => {
            p.load().map_err(err)?;
            let id = p.attach(cgroup, mode).map_err(err)?;
            p.take_link(id).map_err(err)?.try_into().map_err(link_err)?
        }
        Program::CgroupSkb(p) => {
            p.load().map_err(err)?;
            let id = p
                .attach(cgroup, CgroupSkbAttachType::Egress, mode)
                .map_err(err)?;
            p.take_link(id).map_err(err)?.try_into().map_err(link_err)?
        }
        _ => return Err(Error::Missing(name)),
    };
    // bpffs refuses names with a dot (reserved by the kernel for its own files).
    let fresh = links.join(format!("{name}_next"));
    let path = links.join(name);
    remove_if_present(&fresh)?;
    link.pin(&fresh).map_err(|source| Error::Pin {
        path: fresh.clone(),
        source,
    })?;
    if path.exists() {
        let old = PinnedLink::from_pin(&path).map_err(|source| Error::Link {
            path: path.clone(),
            source,
        })?;
        // Unpinned and dropped: the old program is detached.
        old.unpin().map_err(|source| Error::Io {
            what: "cannot unpin",
            path: path.clone(),
            source,
        })?;
    }
    fs::rename(&fresh, &path).map_err(|source| Error::Io {
        what: "cannot rename pinned link to",
        path,
        source,
    })
}

pub(super) fn remove_if_present(path: &Path) -> Result<(), Error> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(Error::Io {
            what: "cannot remove",
            path: path.to_path_buf(),
            source: e,
        }),
        _ => Ok(()),
    }
}

/// The cgroup v2 hierarchy's root: `/sys/fs/cgroup` on a unified host, `/sys/fs/cgroup/unified`
/// on a hybrid one (cgroup v1 controllers at `/sys/fs/cgroup/*`).
pub fn default_cgroup() -> PathBuf {
    use nix::sys::statfs::{CGROUP2_SUPER_MAGIC, statfs};
    let root = Path::new(names::CGROUP_ROOT);
    let is_v2 = |p: &Path| statfs(p).is_ok_and(|s| s.filesystem_type() == CGROUP2_SUPER_MAGIC);
    let unified = root.join("unified");
    if !is_v2(root) && is_v2(&unified) {
        unified
    } else {
        root.to_path_buf()
    }
}

/// Mounts bpffs on [`names::BPFFS`] when the pin root lies there and it is not mounted (Debian
/// does not mount it by default). Also `--init-only`'s work in eBPF mode, from a container
/// whose mounts reach the host's.
pub fn ensure_bpffs(root: &Path) -> Result<(), Error> {
    use nix::sys::statfs::{BPF_FS_MAGIC, statfs};
    let bpffs = Path::new(names::BPFFS);
    if !root.starts_with(bpffs) {
        return Ok(());
    }
    let mounted = statfs(bpffs).is_ok_and(|s| s.filesystem_type() == BPF_FS_MAGIC);
    if mounted {
        return Ok(());
    }
    nix::mount::mount(
        Some("bpf"),
        bpffs,
        Some("bpf"),
        nix::mount::MsFlags::empty(),
        None::<&str>,
    )
    .map_err(|source| Error::Mount {
        path: bpffs.to_path_buf(),
        source,
    })
}

/// `--cleanup`: removes the pin root. Unlinking a pinned cgroup link detaches its program, and
/// unlinking the pinned maps frees them once no program holds them. Returns the pins removed;
/// nothing there is not an error.
pub fn remove(pin_root: &Path) -> Result<usize, Error> {
    if !pin_root.exists() {
        return Ok(0);
    }
    let pins = count_files(pin_root);
    fs::remove_dir_all(pin_root).map_err(|source| Error::Io {
        what: "cannot remove",
        path: pin_root.to_path_buf(),
        source,
    })?;
    Ok(pins)
}

fn count_files(dir: &Path) -> usize {
    let Ok(entries) = fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| {
            let p = e.path();
            if p.is_dir() { count_files(&p) } else { 1 }
        })
        .sum()
}
