//! What `explain` and `status` read of the eBPF mode's pinned maps: the maps themselves,
//! through the reader the applier adopts them with, how they differ from the plan, and the
//! ClientIP affinity entries the programs wrote (a namespace's for the socket programs, a
//! client address's for the tc programs).

use std::net::SocketAddr;
use std::path::Path;

use crate::config::Config;
use crate::dataplane::ebpf;
use crate::dataplane::inspect::clock::read_monotonic_ns;
use crate::dataplane::inspect::{Error, Packet};

/// The maps pinned under `pin_root` (`None`: none are).
pub fn read(pin_root: &Path) -> Result<Option<ebpf::diff::Maps>, Error> {
    ebpf::backend::read_pinned(pin_root).map_err(|e| Error::kernel("reading our pinned maps", e))
}

/// eBPF mode: how the pinned maps (`None`: not pinned) differ from `plan`, per frontend,
/// with how many map writes a sync would make, and the programs not attached.
pub fn drift(
    kernel: Option<&ebpf::diff::Maps>,
    plan: &ebpf::plan::Plan,
    pin_root: &Path,
) -> Vec<String> {
    let Some(kernel) = kernel else {
        return vec![format!(
            "no maps of ours are pinned under {}: nothing of ours balances sockets",
            pin_root.display()
        )];
    };
    let mut out = Vec::new();
    let unattached = ebpf::backend::unattached(pin_root);
    if !unattached.is_empty() {
        out.push(format!(
            "not attached to the cgroup (no pinned link): {}",
            unattached.join(", ")
        ));
    }
    let lines = ebpf::trace::drift(kernel, plan);
    let writes = ebpf::diff::diff(kernel, plan).len();
    let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
    out.extend(crate::dataplane::inspect::table::shortened(
        &lines,
        &format!(
            "{writes} map writes would bring the kernel to the plan (a sync pending, or another \
             program changed our maps):"
        ),
    ));
    out
}

/// eBPF mode: the `kp_aff` entries of the destination's slot set, one line each (none when
/// its entry has no ClientIP affinity). An entry is a network namespace's, which the maps do
/// not tie to an address, so each is named by its backend and age.
pub fn affinity(
    config: &Config,
    maps: &ebpf::diff::Maps,
    request: &Packet,
) -> Result<Vec<String>, Error> {
    let Some(transport) = transport(request.protocol) else {
        return Ok(Vec::new());
    };
    let key = ebpf::diff::svc_key(&ebpf::plan::Frontend {
        ip: request.to.ip(),
        port: request.to.port(),
        transport,
        scope: ebpf::plan::Scope::Socket,
    });
    let Some(val) = maps.svc.get(&key) else {
        return Ok(Vec::new());
    };
    if val.flags & ebpf::layout::SVC_F_AFFINITY == 0 {
        return Ok(Vec::new());
    }
    let pin_root = ebpf::mode::pin_root(config);
    let entries = ebpf::backend::read_affinity(&pin_root, val.svc_id)
        .map_err(|e| Error::Backend(Box::new(e)))?;
    let now_ns = read_monotonic_ns().ok_or(Error::Clock)?;
    if entries.is_empty() {
        return Ok(vec![format!(
            "kp_aff holds no entry for this Service yet: the next connect() from any \
             namespace draws a slot"
        )]);
    }
    Ok(entries
        .iter()
        .map(|(_, v)| {
            let backend = ebpf::layout::Backend {
                addr: v.addr,
                port: v.port,
                pad: 0,
            }
            .socket_addr();
            let age = now_ns.saturating_sub(v.last_used_ns) / 1_000_000_000;
            super::socket_lb::remembered_line(backend, age, val.affinity_timeout)
        })
        .collect())
}

/// A client's `kp_aff` entry from outside, as the tracer takes it (`None`: the client has
/// none), and the backend the program would follow it to (empty: none, or it would not).
pub struct ClientEntry {
    pub entry: Option<ebpf::trace::Remembered>,
    pub followed: Vec<SocketAddr>,
    /// An entry the program would not follow, and why, as a reason line.
    pub ignored: Option<String>,
}

/// eBPF mode: the tc programs' `kp_aff` entry for the client of `request` (from outside) at the
/// destination's external frontend, and the backend it gives: told as remembered only where
/// the program would follow it (within the timeout, its backend still in the set).
/// `Ok(None)`: the frontend has no ClientIP affinity (or no entry of scope external).
pub fn client_entry(
    maps: &ebpf::diff::Maps,
    pin_root: &Path,
    request: &Packet,
) -> Result<Option<ClientEntry>, Error> {
    let Some(transport) = transport(request.protocol) else {
        return Ok(None);
    };
    let key = ebpf::diff::svc_key(&ebpf::plan::Frontend {
        ip: request.to.ip(),
        port: request.to.port(),
        transport,
        scope: ebpf::plan::Scope::External,
    });
    let Some(val) = maps.svc.get(&key) else {
        return Ok(None);
    };
    if val.flags & ebpf::layout::SVC_F_AFFINITY == 0 {
        return Ok(None);
    }
    let cookie = ebpf::trace::client_key(request.source);
    let entries = ebpf::backend::read_affinity(pin_root, val.svc_id)
        .map_err(|e| Error::Backend(Box::new(e)))?;
    let Some((_, entry)) = entries.into_iter().find(|(k, _)| k.netns_cookie == cookie) else {
        return Ok(Some(ClientEntry {
            entry: None,
            followed: Vec::new(),
            ignored: None,
        }));
    };
    let now_ns = read_monotonic_ns().ok_or(Error::Clock)?;
    let remembered = ebpf::trace::Remembered { entry, now_ns };
    let followed = match super::socket_lb::trace(maps, Some(&remembered), request).fate {
        ebpf::trace::Fate::Translated {
            remembered: Some(b),
            ..
        } => vec![b],
        _ => Vec::new(),
    };
    let ignored = followed
        .is_empty()
        .then(|| ignored_line(request.source, &remembered, val.affinity_timeout));
    Ok(Some(ClientEntry {
        entry: Some(remembered),
        followed,
        ignored,
    }))
}

/// Why the tc program would not follow `r`, the client's `kp_aff` entry (the trace found no
/// backend from it): past the Service's timeout, or its backend is no longer in the set.
fn ignored_line(client: std::net::IpAddr, r: &ebpf::trace::Remembered, timeout: u32) -> String {
    let backend = ebpf::layout::Backend {
        addr: r.entry.addr,
        port: r.entry.port,
        pad: 0,
    }
    .socket_addr();
    let age = r.now_ns.saturating_sub(r.entry.last_used_ns) / 1_000_000_000;
    if age > u64::from(timeout) {
        format!(
            "ClientIP affinity: kp_aff remembers {backend} for {client}, {age} s ago, past the \
             {timeout} s timeout: its next connection draws a slot and replaces the entry"
        )
    } else {
        format!(
            "ClientIP affinity: kp_aff remembers {backend} for {client}, which is no longer a \
             backend of this Service: its next connection draws a slot and replaces the entry"
        )
    }
}

fn transport(p: crate::cluster::Protocol) -> Option<ebpf::plan::Transport> {
    match p {
        crate::cluster::Protocol::Tcp => Some(ebpf::plan::Transport::Tcp),
        crate::cluster::Protocol::Udp => Some(ebpf::plan::Transport::Udp),
        crate::cluster::Protocol::Sctp => None,
    }
}
