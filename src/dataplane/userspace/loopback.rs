//! `--nodeport-localhost`: NodePorts on 127.0.0.1 and ::1, served by the relay beside another
//! mode's rules.
//!
//! iptables mode serves loopback NodePorts by DNAT, which needs `route_localnet` (so a packet
//! from 127.0.0.1 may leave the host: the source of CVE-2020-8558); upstream's nftables and
//! IPVS modes do not serve them at all. A listener bound to the loopback address at the
//! NodePort itself needs no rule and no sysctl: the connection never leaves the node's loopback
//! until the relay dials the endpoint from the node's own address. Traffic to a loopback
//! NodePort comes from the node itself, so it takes the `Cluster` policy's endpoints, as every
//! mode's short-circuit gives the node's own traffic.
//!
//! [`WithLoopbackNodePorts`] wraps the mode's dataplane: each sync programs the mode's rules,
//! then reconciles the loopback listeners ([`UserspaceDataplane::loopback_node_ports`]).

use std::sync::Arc;

use super::apply::UserspaceDataplane;
use super::listener_counters::ListenerCounters;
use super::relay::Settings;
use crate::cluster::{Changes, Snapshot};
use crate::config::Config;
use crate::dataplane::mode::Started;
use crate::dataplane::{Dataplane, SyncError, SyncReport};

/// `mode` with the loopback NodePort listeners beside its dataplane when `--nodeport-localhost`
/// asks for them, counted with the mode's own relay listeners (`counters`) if it has any.
pub fn beside(config: &Config, mode: Started, counters: Option<ListenerCounters>) -> Started {
    if !config.userspace.node_port_localhost {
        return mode;
    }
    tracing::info!("serving NodePorts on 127.0.0.1 and ::1 through the relay");
    let counters = counters.unwrap_or_default();
    Started {
        dataplane: Box::new(WithLoopbackNodePorts::new(
            mode.dataplane,
            Settings::of(config),
            counters.clone(),
        )),
        relay: Some(Arc::new(counters)),
        ..mode
    }
}

/// A mode's dataplane plus the loopback NodePort listeners.
pub struct WithLoopbackNodePorts {
    inner: Box<dyn Dataplane>,
    relay: UserspaceDataplane,
}

impl WithLoopbackNodePorts {
    /// `counters`: where the loopback listeners' counters go, shared with the metrics (and, in
    /// userspace mode, with the mode's own listeners).
    pub fn new(
        inner: Box<dyn Dataplane>,
        settings: Settings,
        counters: ListenerCounters,
    ) -> WithLoopbackNodePorts {
        WithLoopbackNodePorts {
            inner,
            relay: UserspaceDataplane::loopback_node_ports(settings).counting_in(counters),
        }
    }
}

impl Dataplane for WithLoopbackNodePorts {
    fn mode(&self) -> &'static str {
        self.inner.mode()
    }

    /// The mode's rules first (its report is the sync's), then the listeners, whose opens,
    /// updates and closes count as operations of their family. A NodePort that cannot be
    /// listened on (another program holds it on loopback) fails the sync after everything else
    /// was done, so the runner retries it.
    fn sync(
        &mut self,
        snapshot: &Snapshot,
        changes: &Changes,
        full: bool,
    ) -> Result<SyncReport, SyncError> {
        let mut report = self.inner.sync(snapshot, changes, full)?;
        let relayed = self.relay.sync(snapshot, changes, full)?;
        for family in &relayed.families {
            if let Some(r) = report
                .families
                .iter_mut()
                .find(|r| r.family == family.family)
            {
                r.operations += family.operations;
            }
        }
        Ok(report)
    }
}
