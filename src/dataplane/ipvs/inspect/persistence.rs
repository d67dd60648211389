//! Whether IPVS remembers a client, on a live ipvs node: its persistence templates.
//!
//! With ClientIP affinity a virtual service is persistent, and IPVS keeps, per client, a
//! template in its connection table naming the real server the client's connections go to
//! until the template expires. `/proc/net/ip_vs_conn` lists connections and templates alike
//! (both families, addresses in hex; `ipvsadm -Lnc` reads the same file); a template is the
//! entry whose client port is 0, which no real connection has. `explain` cuts the virtual
//! service it traces to the remembered real server, as the nftables mode puts the client's
//! affinity entries into the table it traces.
//!
//! Pure but for [`read`]. The file is kernel text, parsed field by field into typed values;
//! a line that does not parse is skipped.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::cluster::Protocol;
use crate::dataplane::inspect::Error;
use crate::dataplane::ipvs::Desired;
use crate::dataplane::ipvs::backend::netlink::ServiceKey;

/// Where the kernel lists IPVS connections and templates of this network namespace.
pub const CONNECTIONS: &str = "/proc/net/ip_vs_conn";

/// One persistence template: `client` is sent to `destination` by virtual service `service`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Template {
    pub protocol: Protocol,
    pub client: IpAddr,
    pub service: SocketAddr,
    pub destination: SocketAddr,
    /// Seconds until it expires (each new connection of the client restarts it).
    pub expires_seconds: u32,
}

/// The connection table's text; `Ok(None)` when IPVS is not loaded (no file).
#[allow(
    clippy::disallowed_methods,
    reason = "the kernel's connection table is read where it is asked for"
)]
pub fn read() -> Result<Option<String>, Error> {
    match std::fs::read_to_string(CONNECTIONS) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::proc(CONNECTIONS, e)),
    }
}

/// The templates in `/proc/net/ip_vs_conn` text.
pub fn parse(text: &str) -> Vec<Template> {
    text.lines().filter_map(template).collect()
}

/// `Pro FromIP FPrt ToIP TPrt DestIP DPrt State Expires [PEName PEData]`, client port 0.
fn template(line: &str) -> Option<Template> {
    let f: Vec<&str> = line.split_whitespace().collect();
    if f.len() < 9 {
        return None;
    }
    let protocol = match f[0] {
        "TCP" => Protocol::Tcp,
        "UDP" => Protocol::Udp,
        "SCTP" => Protocol::Sctp,
        _ => return None,
    };
    let port = |s: &str| u16::from_str_radix(s, 16).ok();
    if port(f[2])? != 0 {
        return None;
    }
    Some(Template {
        protocol,
        client: address(f[1])?,
        service: SocketAddr::new(address(f[3])?, port(f[4])?),
        destination: SocketAddr::new(address(f[5])?, port(f[6])?),
        expires_seconds: f[8].parse().ok()?,
    })
}

/// `0A60000A` (IPv4, hex in network order) or `fd00:0000:…:000a` (IPv6, every group).
fn address(s: &str) -> Option<IpAddr> {
    if s.len() == 8 && !s.contains(':') {
        return u32::from_str_radix(s, 16)
            .ok()
            .map(|n| IpAddr::V4(Ipv4Addr::from(n)));
    }
    s.parse::<Ipv6Addr>().ok().map(IpAddr::V6)
}

/// What the templates say of `client` at virtual service `key`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Remembered {
    /// The real servers it goes to (empty: no template; a new connection is scheduled).
    pub destinations: Vec<SocketAddr>,
    /// A template naming a real server the virtual service no longer has: IPVS drops it at
    /// the client's next connection and schedules anew.
    pub stale: Vec<SocketAddr>,
}

/// Cuts virtual service `key` of `services` to the real server `client`'s template names,
/// so the tracer follows the path IPVS takes for this client now. A template whose real
/// server is gone or at weight 0 (draining) is stale: the service is left as it is.
pub fn apply(
    services: &mut Desired,
    key: &ServiceKey,
    client: IpAddr,
    templates: &[Template],
) -> Remembered {
    let mut out = Remembered {
        destinations: Vec::new(),
        stale: Vec::new(),
    };
    let Some(vs) = services.services.get_mut(key) else {
        return out;
    };
    for t in templates.iter().filter(|t| {
        t.client == client
            && ServiceKey::Address {
                protocol: t.protocol.into(),
                address: t.service,
            } == *key
    }) {
        let live = vs
            .destinations
            .iter()
            .any(|d| d.address == t.destination && d.weight > 0);
        if live {
            out.destinations.push(t.destination);
        } else {
            out.stale.push(t.destination);
        }
    }
    out.destinations.sort();
    out.destinations.dedup();
    if !out.destinations.is_empty() {
        vs.destinations
            .retain(|d| out.destinations.contains(&d.address));
    }
    out
}

/// The reason a stale template gives.
pub fn stale_reason(client: IpAddr, destination: SocketAddr) -> String {
    format!(
        "ClientIP affinity: IPVS still has a persistence template sending {client} to \
         {destination}, which is no longer a destination: the next connection drops it and \
         picks anew"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::IpFamily;
    use crate::dataplane::inspect::Rules as _;
    use crate::dataplane::inspect::sticky::sticky;
    use crate::dataplane::ipvs::inspect::{IpvsRules, Planned};
    use crate::testing::plans::packet;
    use crate::testing::snapshots::{node, node_policy, snapshot};

    /// Shaped like a 6.1 kernel's table on a node with one sticky Service: a template
    /// (client port 0) for 10.244.1.7 and its connection, another client's template and
    /// connection, an IPv6 template, and a UDP connection.
    const CONN: &str = "\
Pro FromIP   FPrt ToIP     TPrt DestIP   DPrt State       Expires PEName PEData
TCP 0AF40107 0000 0A60000A 0050 0AF40202 1F90 NONE          10795
TCP 0AF40107 D4F2 0A60000A 0050 0AF40202 1F90 ESTABLISHED   899
TCP 0AF40108 0000 0A60000A 0050 0AF40302 1F90 NONE          10700
TCP 0AF40108 9C41 0A60000A 0050 0AF40302 1F90 TIME_WAIT     110
TCP fd00:0010:0244:0001:0000:0000:0000:0007 0000 fd00:0010:0096:0000:0000:0000:0000:000a 0050 fd00:0010:0244:0002:0000:0000:0000:0002 1F90 NONE          10790
UDP 0AF40107 A1B2 0A60000A 0035 0AF40202 0035 UDP           299
";

    #[test]
    fn templates_are_the_entries_with_client_port_zero_in_either_family() {
        let t = parse(CONN);
        assert_eq!(t.len(), 3, "{t:?}");
        assert_eq!(
            t[0],
            Template {
                protocol: Protocol::Tcp,
                client: "10.244.1.7".parse().unwrap(),
                service: "10.96.0.10:80".parse().unwrap(),
                destination: "10.244.2.2:8080".parse().unwrap(),
                expires_seconds: 10795,
            }
        );
        assert_eq!(t[2].client, "fd00:10:244:1::7".parse::<IpAddr>().unwrap());
        assert_eq!(t[2].service, "[fd00:10:96::a]:80".parse().unwrap());
        // Nothing else parses into a template.
        assert!(parse("garbage\nTCP zz 0000\n\u{1b}[2J TCP 1 2 3 4 5 6 7 8").is_empty());
    }

    #[test]
    fn a_client_with_a_template_is_traced_to_its_real_server_alone() {
        let snap = snapshot(node(), vec![sticky(10800).ep("10.244.3.2", 8080, "node-c")]);
        let policy = node_policy();
        let plan = Planned::with_policy(&snap, &policy);
        let IpvsRules { desired, tables } = &plan.0[IpFamily::V4.index()];
        let request = packet(&snap, &policy, "10.96.0.10:80", Some("10.244.1.7"));
        let key = ServiceKey::Address {
            protocol: Protocol::Tcp.into(),
            address: request.to,
        };
        let templates = parse(CONN);
        let reach = |d: &Desired| {
            let rules = IpvsRules {
                desired: d.clone(),
                tables: tables.clone(),
            };
            rules
                .walk(&request)
                .endpoints
                .iter()
                .map(|s| s.endpoint.to_string())
                .collect::<Vec<_>>()
        };
        assert_eq!(reach(desired).len(), 3);

        let mut read = desired.clone();
        let r = apply(&mut read, &key, "10.244.1.7".parse().unwrap(), &templates);
        assert_eq!(r.destinations, vec!["10.244.2.2:8080".parse().unwrap()]);
        assert_eq!(reach(&read), ["10.244.2.2:8080"]);

        // Another client's template (10.244.1.8 → 10.244.3.2) changes nothing for a third.
        let mut read = desired.clone();
        let r = apply(&mut read, &key, "10.244.1.9".parse().unwrap(), &templates);
        assert!(r.destinations.is_empty() && r.stale.is_empty());
        assert_eq!(&read, desired);

        // A template naming a real server the service no longer has is stale.
        let mut gone = desired.clone();
        gone.services
            .get_mut(&key)
            .unwrap()
            .destinations
            .retain(|d| d.address.to_string() != "10.244.3.2:8080");
        let r = apply(&mut gone, &key, "10.244.1.8".parse().unwrap(), &templates);
        assert_eq!(r.stale, vec!["10.244.3.2:8080".parse().unwrap()]);
        assert_eq!(reach(&gone).len(), 2);
        assert!(stale_reason("10.244.1.8".parse().unwrap(), r.stale[0]).contains("no longer"));
    }
}
