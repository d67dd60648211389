//! `explain` on a node: which rules to trace (planned from the objects, or read from this
//! node's kernel), wired from the configuration. Shared by the `explain` command, the running
//! proxy's `/debug/explain` and `/debug/status`.

use std::net::SocketAddr;

use super::{
    Explanation, Planned, Request, Rules, RulesFrom, affinity, explain, kernel, others,
    persistence, pinned, recent, saved, sockets,
};
use crate::cluster::{IpFamily, Snapshot};
use crate::config::{Config, ProxyMode};
use crate::dataplane::ipvs::backend::netlink::ServiceKey;
use crate::dataplane::node::NodePolicy;
use crate::dataplane::userspace::{self, trace::RelayPorts};
use crate::dataplane::{ebpf, iptables, ipvs, nftables};
use crate::nft;

/// The rules the configured mode plans for `snapshot`, with the node policy its tracer reads.
/// On a live node (`offline` false) the IPVS mode plans its NodePorts over the host's
/// addresses, as its sync does; offline the Node object's addresses stand in for them.
pub fn plan_on_node(
    config: &Config,
    snapshot: &Snapshot,
    offline: bool,
) -> Result<(Planned, NodePolicy), String> {
    Ok(match config.mode {
        ProxyMode::Nftables => {
            let mode = nftables::ModeConfig::new(config).map_err(|e| e.to_string())?;
            (Planned::nftables(snapshot, &mode), mode.node)
        }
        ProxyMode::Iptables => {
            let mode = iptables::ModeConfig::new(config).map_err(|e| e.to_string())?;
            (Planned::iptables(snapshot, &mode), mode.node)
        }
        ProxyMode::Ipvs => {
            let mode = ipvs::ModeConfig::new(config).map_err(|e| e.to_string())?;
            let host = if offline {
                ipvs::HostAddresses::default()
            } else {
                ipvs_host_addresses()?
            };
            (Planned::ipvs_on(snapshot, &mode, &host), mode.node)
        }
        ProxyMode::Ebpf => {
            let node = NodePolicy::new(config).map_err(|e| e.to_string())?;
            (Planned::ebpf(snapshot, &config.node_port_addresses), node)
        }
        ProxyMode::Userspace => {
            let node = NodePolicy::new(config).map_err(|e| e.to_string())?;
            let settings = userspace::redirect::Settings::of(config, &node);
            (Planned::userspace(snapshot, settings), node)
        }
    })
}

/// This host's node addresses outside `kube-ipvs0` (all of them when it is not there), read
/// as the IPVS mode's sync reads them, without creating the link.
fn ipvs_host_addresses() -> Result<ipvs::HostAddresses, String> {
    let read = || -> Result<_, ipvs::backend::link::Error> {
        let mut client = ipvs::backend::link::Client::open(None)?;
        let index = client.find(ipvs::names::LINK)?.map_or(0, |l| l.index);
        Ok(client.addresses_beside(index)?.elsewhere)
    };
    read()
        .map(ipvs::HostAddresses)
        .map_err(|e| format!("reading this host's addresses: {e}"))
}

/// One family's rules as this node's kernel holds them, and where they differ from the plan.
#[derive(Debug)]
pub struct Read {
    /// Our nftables table: the whole dataplane in nftables mode, the helper rules in ipvs mode
    /// (`None`: not in the kernel).
    table: Option<nft::Ruleset>,
    empty: nft::Ruleset,
    /// IPVS mode: the planned virtual services as the kernel holds them.
    services: Option<ipvs::Desired>,
    /// iptables mode: our chains as the kernel holds them (empty when they are not there).
    chains: Option<iptables::Ruleset>,
    /// Userspace mode: the listeners the kernel's redirect rules lead to.
    relay: Option<RelayPorts>,
    /// eBPF mode: the pinned maps (empty when none are pinned).
    maps: Option<ebpf::diff::Maps>,
    /// eBPF mode: the tc programs' `kp_aff` entry for the client from outside, if any.
    remembered: Option<ebpf::trace::Remembered>,
    /// Missing, extra or different objects, one line each, or the repair script's first lines.
    pub drift: Vec<String>,
    /// IPVS mode: destinations at weight 0 the plan no longer has (graceful termination).
    pub draining: Vec<(ServiceKey, SocketAddr)>,
}

impl Read {
    /// The rules read, for the tracer.
    pub fn rules(&self) -> Rules<'_> {
        if let Some(maps) = &self.maps {
            return Rules::Ebpf {
                maps,
                remembered: self.remembered.as_ref(),
            };
        }
        if let Some(chains) = &self.chains {
            return Rules::Iptables(chains);
        }
        let table = self.table.as_ref().unwrap_or(&self.empty);
        if let Some(relay) = &self.relay {
            return Rules::Userspace {
                tables: table,
                relay,
            };
        }
        match &self.services {
            Some(desired) => Rules::Ipvs {
                desired,
                tables: table,
            },
            None => Rules::Nftables(table),
        }
    }
}

/// Reads `family`'s rules from this node's kernel, through the reader the mode's applier
/// adopts with; for one `packet` only what its path needs, where reading less is faster
/// (iptables-nft, see [`super::scoped`]).
pub fn read_family(
    config: &Config,
    snapshot: &Snapshot,
    planned: &Planned,
    family: IpFamily,
    packet: Option<&super::scoped::Packet>,
) -> Result<Read, String> {
    let table_family = nft::ruleset::Family::of(family);
    let read_table = || kernel::read_nftables(config.nftables_encoder, None, table_family);
    let empty = nft::Ruleset::empty(table_family);
    if let Planned::Ebpf { plan, .. } = planned {
        let pin_root = crate::dataplane::ebpf::mode::pin_root(config);
        let read = pinned::read(&pin_root)?;
        let drift = pinned::drift(read.as_ref(), plan, &pin_root);
        return Ok(Read {
            table: None,
            empty,
            services: None,
            chains: None,
            relay: None,
            maps: Some(read.unwrap_or_default()),
            remembered: None,
            drift,
            draining: Vec::new(),
        });
    }
    if let Planned::Userspace {
        listeners,
        settings,
        ..
    } = planned
    {
        let table = read_table()?;
        let (relay, drift) = match &table {
            Some(t) => {
                let read = RelayPorts::read(t, snapshot, listeners, settings, family);
                let mut drift = kernel::drift(Some(t), &read.want);
                drift.extend(sockets::not_listening(&read.ports)?);
                (read.relay, drift)
            }
            None => (RelayPorts::default(), kernel::drift(None, &empty)),
        };
        return Ok(Read {
            table,
            empty,
            services: None,
            chains: None,
            relay: Some(relay),
            maps: None,
            remembered: None,
            drift,
            draining: Vec::new(),
        });
    }
    match planned.rules(family) {
        Rules::Userspace { .. } | Rules::Ebpf { .. } => unreachable!("read above"),
        Rules::Iptables(want) => {
            let read = saved::read_iptables(None, family, want, packet)?;
            Ok(Read {
                table: None,
                empty,
                services: None,
                relay: None,
                maps: None,
                remembered: None,
                chains: Some(
                    read.rules
                        .unwrap_or_else(|| iptables::Ruleset::empty(family)),
                ),
                drift: read.drift,
                draining: Vec::new(),
            })
        }
        Rules::Nftables(want) => {
            let table = read_table()?;
            let drift = kernel::drift(table.as_ref(), want);
            Ok(Read {
                table,
                empty,
                services: None,
                chains: None,
                relay: None,
                maps: None,
                remembered: None,
                drift,
                draining: Vec::new(),
            })
        }
        Rules::Ipvs { desired, tables } => {
            let ipvs = kernel::ipvs_as_read(desired, &kernel::read_ipvs(None, family)?);
            let mut drift = ipvs.drift;
            let table = read_table()?;
            drift.extend(kernel::drift(table.as_ref(), tables));
            Ok(Read {
                table,
                empty,
                services: Some(ipvs.services),
                chains: None,
                relay: None,
                maps: None,
                remembered: None,
                drift,
                draining: ipvs.draining,
            })
        }
    }
}

/// Explains `request` over `snapshot` in the configured mode: the rules planned for the
/// objects when `offline` (`explain --manifests`); otherwise what the kernel holds, with its
/// drift from the plan.
pub fn explain_on_node(
    config: &Config,
    snapshot: &Snapshot,
    request: &Request,
    offline: bool,
) -> Result<Explanation, String> {
    let family = IpFamily::of(&request.to.ip());
    let (planned, node) = plan_on_node(config, snapshot, offline)?;
    let read = if offline {
        None
    } else {
        let packet = super::scoped::Packet {
            to: request.to.ip(),
            port: request.to.port(),
            protocol: request.protocol,
        };
        Some(read_family(
            config,
            snapshot,
            &planned,
            family,
            Some(&packet),
        )?)
    };
    match read {
        None => explain(
            snapshot,
            &node,
            planned.rules(family),
            RulesFrom::Planned,
            request,
        )
        .map_err(|e| e.to_string()),
        Some(mut read) => {
            let mut unread = Vec::new();
            // The client's affinity entries, so the trace is its path now. What the kernel
            // remembers is a detail of the answer: state that cannot be read leaves the entry
            // unknown, not the explanation.
            let mut stale = Vec::new();
            let remembered = match remember(config, snapshot, &node, request, &mut read) {
                Ok((found, s)) => {
                    stale = s;
                    found
                }
                Err(why) => {
                    unread.push(format!("affinity entries not looked up: {why}"));
                    None
                }
            };
            let mut e = explain(snapshot, &node, read.rules(), RulesFrom::Kernel, request)
                .map_err(|e| e.to_string())?;
            if let (Some(remembered), Some(a)) = (&remembered, e.affinity.as_mut()) {
                a.entry = Some(!remembered.is_empty());
                let why = affinity::reason(e.packet.source, remembered, a.timeout_seconds);
                e.reasons.push(why);
            }
            if let Some(maps) = read.maps.as_ref().filter(|_| e.packet.origin != "outside") {
                match pinned::affinity(config, maps, request) {
                    Ok(lines) => e.reasons.extend(lines),
                    Err(why) => unread.push(format!("affinity entries not read: {why}")),
                }
            }
            for later in stale {
                e.reasons.push(match later {
                    Later::StaleTemplate(destination) => {
                        persistence::stale_reason(e.packet.source, destination)
                    }
                    Later::Line(line) => line,
                });
            }
            let key = ServiceKey::Address {
                protocol: request.protocol.into(),
                address: request.to,
            };
            for (_, destination) in read.draining.iter().filter(|(k, _)| *k == key) {
                e.reasons.push(kernel::draining_reason(*destination));
            }
            // In iptables mode our rules live in iptables-nft's own tables (or outside
            // nf_tables, with legacy): another table's base chain has no "ours" to stand
            // before or after, so none is named.
            // In ebpf mode nothing of ours is in nf_tables: the programs act on the socket
            // before any packet exists.
            let listed = if read.chains.is_some() || read.maps.is_some() {
                Ok(None)
            } else {
                kernel::base_chains(config.nftables_encoder, None)
            };
            match listed {
                Ok(Some(chains)) => {
                    let from_node = e.packet.origin == "node";
                    e.other_chains =
                        others::on_path(read.table.as_ref(), &chains, family, from_node);
                }
                Ok(None) => {}
                Err(why) => unread.push(format!("other tables' chains not listed: {why}")),
            }
            e.reasons.extend(unread);
            e.drift.extend(read.drift);
            Ok(e)
        }
    }
}

/// A reason about the client's affinity state told after the trace's own.
enum Later {
    /// An IPVS persistence template naming a real server that is gone.
    StaleTemplate(SocketAddr),
    /// A line made when the entry was read (eBPF: an entry the program would not follow).
    Line(String),
}

/// The client's affinity entries in the kernel, put into `read` for the tracer, in each
/// mode's own form: nftables' affinity sets, iptables' `recent` lists, IPVS persistence
/// templates. Returns the endpoints remembered for the client (`None`: the port has no
/// affinity, or the kernel cannot tell), and IPVS templates naming a real server that is gone.
fn remember(
    config: &Config,
    snapshot: &Snapshot,
    node: &NodePolicy,
    request: &Request,
    read: &mut Read,
) -> Result<(Option<Vec<SocketAddr>>, Vec<Later>), String> {
    let family = IpFamily::of(&request.to.ip());
    if let Some(maps) = &read.maps {
        // The socket programs key their entries by network namespace, not address: they are
        // listed beside the trace ([`pinned::affinity`]), not matched to the client. The tc
        // programs key a client from outside by its address: its entry goes to the tracer.
        let source = super::source::Source::resolve(snapshot, node, request, family)
            .map_err(|e| e.to_string())?;
        if source.origin != super::source::Origin::Outside {
            return Ok((None, Vec::new()));
        }
        let pin_root = crate::dataplane::ebpf::mode::pin_root(config);
        let Some(found) = pinned::client_entry(maps, &pin_root, request, &source)? else {
            return Ok((None, Vec::new()));
        };
        read.remembered = found.entry;
        if let Some(line) = found.ignored {
            // There is an entry, but the program would not follow it: not "no entry".
            return Ok((None, vec![Later::Line(line)]));
        }
        return Ok((Some(found.followed), Vec::new()));
    }
    if read.relay.is_some() {
        // The relay keeps its ClientIP affinity in its own memory, which no reader sees.
        return Ok((None, Vec::new()));
    }
    if let Some(chains) = read.chains.as_mut() {
        let found = recent::add_entries(
            snapshot,
            node,
            request,
            chains,
            &mut recent::ProcLists,
            recent::read_clock(),
        )?;
        return Ok((found, Vec::new()));
    }
    if let Some(services) = read.services.as_mut() {
        let affinity = super::find(snapshot, request, family)
            .is_some_and(|(s, _)| s.port.affinity_timeout_seconds.is_some());
        if !affinity {
            return Ok((None, Vec::new()));
        }
        let Some(text) = persistence::read()? else {
            return Ok((None, Vec::new()));
        };
        let client = super::source::Source::resolve(snapshot, node, request, family)
            .map_err(|e| e.to_string())?
            .address;
        let key = ServiceKey::Address {
            protocol: request.protocol.into(),
            address: request.to,
        };
        let r = persistence::apply(services, &key, client, &persistence::parse(&text));
        let stale = r.stale.into_iter().map(Later::StaleTemplate).collect();
        return Ok((Some(r.destinations), stale));
    }
    let Some(table) = read.table.as_mut() else {
        return Ok((None, Vec::new()));
    };
    let mut sets = kernel::NftablesSets::new(
        config.nftables_encoder,
        None,
        nft::ruleset::Family::of(family),
    );
    let found = affinity::add_entries(snapshot, node, request, table, &mut sets)?;
    Ok((found, Vec::new()))
}
