//! The IPVS mode's part in `explain` and `status`: its virtual services and helper table
//! planned or read back, walked by its tracer, the destinations draining, and the clients its
//! persistence templates remember.

pub mod kernel;
pub mod persistence;

#[cfg(test)]
mod hostile_tests;

use crate::cluster::{IpFamily, Snapshot};
use crate::config::Config;
use crate::dataplane::inspect::table::OurTable;
use crate::dataplane::inspect::{self, Destination, Outcome, Packet, affinity_of, from_branches};
use crate::dataplane::ipvs::backend::netlink::ServiceKey;
use crate::dataplane::ipvs::{self, Desired, HostAddresses, ModeConfig};
use crate::dataplane::node::NodePolicy;
use crate::nft::{self, Ruleset};

/// The mode's inspection.
pub struct Inspect;

impl inspect::Inspect for Inspect {
    /// On a live node the NodePorts are planned over the host's addresses, as the sync does.
    fn plan(
        &self,
        config: &Config,
        snapshot: &Snapshot,
        offline: bool,
    ) -> Result<(Box<dyn inspect::Plan>, NodePolicy), inspect::Error> {
        let mode = ModeConfig::new(config)?;
        let host = if offline {
            HostAddresses::default()
        } else {
            host_addresses()?
        };
        Ok((Box::new(Planned::on(snapshot, &mode, &host)), mode.node))
    }
}

/// This host's node addresses outside `kube-ipvs0` (all of them when it is not there), read
/// as the sync reads them, without creating the link.
fn host_addresses() -> Result<HostAddresses, inspect::Error> {
    let read = || -> Result<_, ipvs::backend::link::Error> {
        let mut client = ipvs::backend::link::Client::open(None)?;
        let index = client.find(ipvs::names::LINK)?.map_or(0, |l| l.index);
        Ok(client.addresses_beside(index)?.elsewhere)
    };
    read()
        .map(HostAddresses)
        .map_err(|e| inspect::Error::kernel("reading this host's addresses", e))
}

/// One family's virtual services and the helper table of our nftables table.
#[derive(Clone, Debug)]
pub struct IpvsRules {
    pub desired: Desired,
    pub tables: Ruleset,
}

/// Both families' planned rules.
#[derive(Debug)]
pub struct Planned(pub [IpvsRules; 2]);

impl Planned {
    /// The plan over the host's addresses outside `kube-ipvs0` (`host`; empty: the Node
    /// object's stand in).
    pub fn on(snapshot: &Snapshot, cfg: &ModeConfig, host: &HostAddresses) -> Planned {
        let desired = ipvs::plan_all(snapshot, cfg, host);
        let node_ips = if host.0.is_empty() {
            snapshot.node.local_addresses().into_iter().collect()
        } else {
            host.0.clone()
        };
        let bound = ipvs::bound_addresses(&desired, &node_ips);
        let mut tables = ipvs::rules_all(&desired, cfg, &snapshot.node, &bound).into_iter();
        Planned(desired.map(|desired| IpvsRules {
            desired,
            tables: tables.next().expect("a helper table per family"),
        }))
    }

    /// The plan with the default configuration beside `node`, the Node object's addresses
    /// standing in for the host's.
    pub fn with_policy(snapshot: &Snapshot, node: &NodePolicy) -> Planned {
        let cfg = ModeConfig {
            node: node.clone(),
            ..ModeConfig::default()
        };
        Planned::on(snapshot, &cfg, &HostAddresses::default())
    }
}

impl inspect::Plan for Planned {
    fn rules(&self, family: IpFamily) -> &dyn inspect::Rules {
        &self.0[family.index()]
    }

    fn read(
        &self,
        config: &Config,
        _snapshot: &Snapshot,
        family: IpFamily,
        _packet: Option<&Destination>,
    ) -> Result<Box<dyn inspect::Read>, inspect::Error> {
        let planned = &self.0[family.index()];
        let ipvs = kernel::ipvs_as_read(&planned.desired, &kernel::read_ipvs(None, family)?);
        let mut drift_lines = ipvs.drift;
        let table = OurTable::read(config.nftables_encoder, family)?;
        drift_lines.extend(table.drift(&planned.tables));
        Ok(Box::new(Read {
            table_read: table.found,
            rules: IpvsRules {
                desired: ipvs.services,
                tables: table.rules,
            },
            drift: drift_lines,
            draining: ipvs.draining,
        }))
    }
}

impl inspect::Rules for IpvsRules {
    fn mode(&self) -> &'static str {
        "ipvs"
    }

    fn walk(&self, packet: &Packet) -> Outcome {
        from_branches(&ipvs::trace::trace(
            &self.desired,
            &self.tables,
            &packet.nft(),
            &packet.local,
        ))
    }
}

/// The planned virtual services as the kernel holds them, and our helper table.
#[derive(Debug)]
struct Read {
    rules: IpvsRules,
    /// Whether our nftables table is in the kernel (its rules are empty when not).
    table_read: bool,
    drift: Vec<String>,
    /// Destinations at weight 0 the plan no longer has (graceful termination).
    draining: Vec<(ServiceKey, std::net::SocketAddr)>,
}

/// The virtual service a packet's destination is.
fn service_key(packet: &Packet) -> ServiceKey {
    ServiceKey::Address {
        protocol: packet.protocol.into(),
        address: packet.to,
    }
}

impl inspect::Read for Read {
    fn rules(&self) -> &dyn inspect::Rules {
        &self.rules
    }

    fn drift(&self) -> &[String] {
        &self.drift
    }

    /// The client's persistence template cuts its virtual service to the remembered real
    /// server; a template naming a real server that is gone is told after the trace.
    fn remember(
        &mut self,
        _config: &Config,
        snapshot: &Snapshot,
        packet: &Packet,
    ) -> Result<inspect::Remembered, inspect::Error> {
        if affinity_of(snapshot, packet.protocol, packet.to).is_none() {
            return Ok(inspect::Remembered::default());
        }
        let Some(text) = persistence::read()? else {
            return Ok(inspect::Remembered::default());
        };
        let r = persistence::apply(
            &mut self.rules.desired,
            &service_key(packet),
            packet.source,
            &persistence::parse(&text),
        );
        Ok(inspect::Remembered {
            endpoints: Some(r.destinations),
            later: r
                .stale
                .into_iter()
                .map(|d| persistence::stale_reason(packet.source, d))
                .collect(),
            unread: Vec::new(),
        })
    }

    fn draining(&self, packet: &Packet) -> Vec<String> {
        let key = service_key(packet);
        self.draining
            .iter()
            .filter(|(k, _)| *k == key)
            .map(|(_, destination)| kernel::draining_reason(*destination))
            .collect()
    }

    fn beside(&self) -> Option<Option<&nft::Ruleset>> {
        Some(self.table_read.then_some(&self.rules.tables))
    }
}
