//! Userspace mode: whether something listens on each port the redirect rules send traffic to,
//! read from this network namespace's socket tables (`/proc/net/{tcp,tcp6,udp,udp6}`). A rule
//! that leads to a port nobody listens on is the mode's own kind of drift: the connection is
//! refused by the node, not by a rule of ours.
//!
//! The tables are text the kernel has kept stable for decades; reading them needs no netlink
//! sock_diag client for what is a lookup of a few ports.

use std::collections::{BTreeMap, BTreeSet};

use crate::cluster::Protocol;
use crate::dataplane::inspect::Error;
use crate::dataplane::userspace::plan::{self, Key};

/// One line per listener whose port has no listening socket of its protocol.
pub fn not_listening(ports: &BTreeMap<Key, u16>) -> Result<Vec<String>, Error> {
    let read = |file: &str| {
        let path = format!("/proc/net/{file}");
        std::fs::read_to_string(&path)
            .or_else(|e| match e.kind() {
                // A kernel without IPv6 has no tcp6/udp6.
                std::io::ErrorKind::NotFound => Ok(String::new()),
                _ => Err(e),
            })
            .map_err(|e| Error::proc(path, e))
    };
    let mut tcp = listening(&read("tcp")?, Protocol::Tcp);
    tcp.extend(listening(&read("tcp6")?, Protocol::Tcp));
    let mut udp = listening(&read("udp")?, Protocol::Udp);
    udp.extend(listening(&read("udp6")?, Protocol::Udp));
    Ok(missing(ports, &tcp, &udp))
}

fn missing(ports: &BTreeMap<Key, u16>, tcp: &BTreeSet<u16>, udp: &BTreeSet<u16>) -> Vec<String> {
    ports
        .iter()
        .filter(|(key, port)| match key.port.protocol {
            Protocol::Tcp => !tcp.contains(port),
            Protocol::Udp => !udp.contains(port),
            Protocol::Sctp => false,
        })
        .map(|(key, port)| {
            format!(
                "the rules send {} to port {port}, where nothing listens (the proxy's listener \
                 is gone: is the proxy running?)",
                plan::name(key)
            )
        })
        .collect()
}

/// The local ports of listening sockets in one `/proc/net` socket table: TCP sockets in
/// LISTEN, UDP sockets with no remote address (bound, not connected).
fn listening(table: &str, protocol: Protocol) -> BTreeSet<u16> {
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let mut fields = line.split_whitespace().skip(1);
            let local = fields.next()?;
            let remote = fields.next()?;
            let state = fields.next()?;
            let open = match protocol {
                Protocol::Tcp => state == "0A",
                _ => remote.rsplit_once(':').is_some_and(|(_, p)| p == "0000"),
            };
            let (_, port) = local.rsplit_once(':')?;
            open.then(|| u16::from_str_radix(port, 16).ok()).flatten()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const TCP: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:A01F 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0000000000000000 100 0 0 10 0
   1: 0100007F:1F90 0100007F:C350 01 00000000:00000000 00:00000000 00000000     0        0 2 1 0000000000000000 20 4 30 10 -1
";
    const UDP: &str = "   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops
  10: 00000000:A020 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 3 2 0000000000000000 0
  11: 0B01A8C0:D431 0A0AF40A:0035 01 00000000:00000000 00:00000000 00000000     0        0 4 2 0000000000000000 0
";

    #[test]
    fn listening_tcp_and_bound_udp_sockets_count_and_connected_ones_do_not() {
        assert_eq!(listening(TCP, Protocol::Tcp), BTreeSet::from([0xA01F]));
        assert_eq!(listening(UDP, Protocol::Udp), BTreeSet::from([0xA020]));
        assert!(listening("garbage\nnot a table line\n", Protocol::Tcp).is_empty());
    }

    #[test]
    fn a_port_without_its_protocols_listener_is_named() {
        use crate::cluster::{IpFamily, ServiceKey, ServicePortName};
        let key = |protocol| Key {
            port: ServicePortName {
                service: ServiceKey::new("default", "web"),
                port: "http".into(),
                protocol,
            },
            family: IpFamily::V4,
            list: plan::List::Cluster,
        };
        let ports = BTreeMap::from([(key(Protocol::Tcp), 0xA01F), (key(Protocol::Udp), 0xA01F)]);
        let lines = missing(
            &ports,
            &listening(TCP, Protocol::Tcp),
            &listening(UDP, Protocol::Udp),
        );
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(lines[0].contains("port 40991"), "{lines:?}");
    }
}
