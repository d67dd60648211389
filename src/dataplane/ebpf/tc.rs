//! The tc side of the eBPF mode: which interfaces carry traffic from outside the node, and
//! attaching `bpf/kp_tc.c`'s programs to them (ingress and egress), pinned so they outlive the
//! proxy.
//!
//! Interfaces: every interface of the node's network namespace that is up, but loopback.
//! Packets from outside arrive on those carrying the node's addresses; replies of
//! source-NATed flows come back to a node address over whatever leads to the backend: the
//! node's network for a remote one, the pod's own interface for a local one, which on
//! routed pod networks (a veth per pod, Calico style) carries no address at all. A pod's
//! interface exists before the pod is ready, so before the sync that makes it an endpoint,
//! which attaches to it ([`super::backend::Backend::refresh_external`]). On interfaces
//! that are no frontend's way in the programs only look flows up. Only Ethernet-like
//! interfaces (veth, bridges, VXLAN, NICs): the programs parse an Ethernet header.
//!
//! Attachment: TCX links (kernel 6.6+) pinned as `links/tc_<ifindex>_<direction>`, replaced
//! across restarts as the cgroup links are (the new link goes in before the old one is
//! unpinned; two programs in a row are harmless: the first redirects what it translates, and
//! `kp_flow` is shared). On older kernels aya attaches through a clsact qdisc over netlink;
//! such an attachment cannot be pinned, so it lasts as long as the proxy (held by the caller).

use std::fs;
use std::path::Path;

use aya::Ebpf;
use aya::programs::links::{FdLink, PinnedLink};
use aya::programs::tc::{self, SchedClassifierLink, TcAttachType};
use aya::programs::{Link as _, Program};
use nix::ifaddrs::getifaddrs;
use nix::net::if_::InterfaceFlags;

use super::backend::Error;
use super::names;

/// `ARPHRD_ETHER`: the link type of Ethernet-like interfaces (also veth, bridges, VXLAN).
const ARPHRD_ETHER: u16 = 1;

/// An interface the tc programs go on.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Interface {
    pub name: String,
    pub index: u32,
}

/// The interfaces of the current network namespace the tc programs go on (see the module
/// doc).
pub fn node_interfaces() -> Result<Vec<Interface>, Error> {
    let addrs = getifaddrs().map_err(|e| Error::Io {
        what: "cannot list the addresses of",
        path: "this network namespace".into(),
        source: e.into(),
    })?;
    let mut out = Vec::new();
    for a in addrs {
        if !a.flags.contains(InterfaceFlags::IFF_UP)
            || a.flags.contains(InterfaceFlags::IFF_LOOPBACK)
        {
            continue;
        }
        // The link-layer entry (one per interface): Ethernet only, as the programs read an
        // Ethernet header first; an L3 device (IPIP, WireGuard) hands them the IP header at
        // offset 0.
        let Some(link) = a.address.as_ref().and_then(|addr| addr.as_link_addr()) else {
            continue;
        };
        if link.hatype() != ARPHRD_ETHER {
            continue;
        }
        let index = u32::try_from(link.ifindex()).unwrap_or(0);
        out.push(Interface {
            name: a.interface_name,
            index,
        });
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// The calling thread's network namespace, by inode: interface names and indexes mean
/// something only within one.
pub fn current_netns() -> Result<u64, Error> {
    use std::os::unix::fs::MetadataExt as _;
    let path = "/proc/thread-self/ns/net";
    fs::metadata(path)
        .map(|m| m.ino())
        .map_err(|source| Error::Io {
            what: "cannot read",
            path: path.into(),
            source,
        })
}

/// Attachments that could not be pinned (no TCX): they detach when dropped.
#[derive(Default)]
pub struct Unpinned(Vec<SchedClassifierLink>);

impl Unpinned {
    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Drop for Unpinned {
    fn drop(&mut self) {
        for link in self.0.drain(..) {
            let _ = link.detach();
        }
    }
}

/// Loads the tc programs of `ebpf` (once) and attaches them to `ifaces`, ingress and egress,
/// pinning each TCX link under `links`. Returns the pin names written (or, without TCX, the
/// attachments in `unpinned`).
pub fn attach(
    ebpf: &mut Ebpf,
    ifaces: &[Interface],
    links: &Path,
    unpinned: &mut Unpinned,
) -> Result<Vec<String>, Error> {
    let mut pinned = Vec::new();
    for (name, direction) in names::TC_PROGRAMS {
        let attach_type = match direction {
            names::Direction::Ingress => TcAttachType::Ingress,
            names::Direction::Egress => TcAttachType::Egress,
        };
        let err = |source| Error::Program { name, source };
        let Some(Program::SchedClassifier(p)) = ebpf.program_mut(name) else {
            return Err(Error::Missing(name));
        };
        if p.fd().is_err() {
            p.load().map_err(err)?;
        }
        // aya attaches with TCX from 6.6 on, through a clsact qdisc before.
        let tcx = aya::util::KernelVersion::current()
            .is_ok_and(|v| v >= aya::util::KernelVersion::new(6, 6, 0));
        for iface in ifaces {
            if !tcx {
                // Present already is fine.
                let _ = tc::qdisc_add_clsact(&iface.name);
            }
            let id = p.attach(&iface.name, attach_type).map_err(err)?;
            let link = p.take_link(id).map_err(err)?;
            if !tcx {
                unpinned.0.push(link);
                continue;
            }
            let pin = names::tc_link(iface.index, direction);
            let fd = FdLink::try_from(link).map_err(|source| Error::Link {
                path: links.join(&pin),
                source,
            })?;
            replace_pin(fd, &links.join(&pin))?;
            pinned.push(pin);
        }
    }
    Ok(pinned)
}

/// Pins `link` at `path`, unpinning (and so detaching) what was pinned there only after.
fn replace_pin(link: FdLink, path: &Path) -> Result<(), Error> {
    // bpffs refuses names with a dot.
    let fresh = path.with_file_name(format!(
        "{}_next",
        path.file_name().unwrap_or_default().to_string_lossy()
    ));
    if fresh.exists() {
        fs::remove_file(&fresh).map_err(|source| Error::Io {
            what: "cannot remove",
            path: fresh.clone(),
            source,
        })?;
    }
    link.pin(&fresh).map_err(|source| Error::Pin {
        path: fresh.clone(),
        source,
    })?;
    if path.exists() {
        let old = PinnedLink::from_pin(path).map_err(|source| Error::Link {
            path: path.to_path_buf(),
            source,
        })?;
        old.unpin().map_err(|source| Error::Io {
            what: "cannot unpin",
            path: path.to_path_buf(),
            source,
        })?;
    }
    fs::rename(&fresh, path).map_err(|source| Error::Io {
        what: "cannot rename pinned link to",
        path: path.to_path_buf(),
        source,
    })
}
