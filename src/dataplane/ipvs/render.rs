//! The desired IPVS state as text for people: `ipvsadm -S -n`'s restore lines (what
//! `ipvsadm -R` would program, in the shape operators know from `ipvsadm -Sn`), plus comment
//! lines for the addresses bound on `kube-ipvs0` and each virtual service's guard. Pure; for
//! `plan --proxy-mode ipvs` and logs. The kernel is programmed over netlink, never with this.

use std::fmt::Write as _;

use super::backend::netlink::{Flags, Protocol, Service, ServiceKey};
use super::desired::{Desired, Guard};
use super::names;
use crate::cluster::IpFamily;

/// Every family's state: bound addresses, then services with their destinations.
pub fn render_all(states: &[Desired]) -> String {
    let mut out = String::new();
    for d in states {
        render(&mut out, d);
    }
    out
}

fn render(out: &mut String, d: &Desired) {
    let _ = write!(out, "# {} {}:", d.family, names::LINK);
    for ip in &d.addresses.cluster_ips {
        let _ = write!(out, " {ip}");
    }
    if !d.addresses.external.is_empty() {
        out.push_str(" + unless on another interface:");
        for ip in &d.addresses.external {
            let _ = write!(out, " {ip}");
        }
    }
    out.push('\n');
    for vs in d.services.values() {
        if let Some(why) = guard(vs.guard) {
            let _ = writeln!(out, "# {}: {why}", vs.service.key);
        }
        service_line(out, &vs.service);
        let key = key_words(&vs.service.key);
        for dest in &vs.destinations {
            let _ = writeln!(out, "-a {key} -r {} -m -w {}", dest.address, dest.weight);
        }
    }
}

fn guard(g: Guard) -> Option<&'static str> {
    match g {
        Guard::None => None,
        Guard::Reject => Some("no endpoints: refused (TCP reset, else ICMP port unreachable)"),
        Guard::Drop => Some("no local endpoint for its Local policy: dropped"),
        Guard::DropFromOutside => Some(
            "externalTrafficPolicy Local, no local endpoint: dropped from outside the node, \
             pods and the node reach the cluster's endpoints",
        ),
    }
}

/// `-A <key> -s <scheduler> [-p <timeout> [-M <netmask>]] [-b <flags>]`, as ipvsadm saves it.
fn service_line(out: &mut String, s: &Service) {
    let _ = write!(out, "-A {} -s {}", key_words(&s.key), s.scheduler);
    if s.flags.contains(Flags::PERSISTENT) {
        let _ = write!(out, " -p {}", s.timeout);
        let family = s.key.family();
        if s.netmask != super::backend::netlink::value::single_address_netmask(family) {
            match family {
                IpFamily::V4 => {
                    let _ = write!(out, " -M {}", std::net::Ipv4Addr::from(s.netmask));
                }
                IpFamily::V6 => {
                    let _ = write!(out, " -M {}", s.netmask);
                }
            }
        }
    }
    let flags = scheduler_flags(s);
    if !flags.is_empty() {
        let _ = write!(out, " -b {}", flags.join(","));
    }
    out.push('\n');
}

/// The scheduler flags by the names ipvsadm gives them for this scheduler.
fn scheduler_flags(s: &Service) -> Vec<&'static str> {
    let names: [&str; 3] = match s.scheduler.as_str() {
        "sh" => ["sh-fallback", "sh-port", "flag-3"],
        "mh" => ["mh-fallback", "mh-port", "flag-3"],
        _ => ["flag-1", "flag-2", "flag-3"],
    };
    [Flags::SCHED1, Flags::SCHED2, Flags::SCHED3]
        .into_iter()
        .zip(names)
        .filter(|(f, _)| s.flags.contains(*f))
        .map(|(_, n)| n)
        .collect()
}

fn key_words(key: &ServiceKey) -> String {
    match key {
        ServiceKey::Address { protocol, address } => {
            let option = match protocol {
                Protocol::Tcp => "-t".to_owned(),
                Protocol::Udp => "-u".to_owned(),
                Protocol::Sctp => "--sctp-service".to_owned(),
                Protocol::Other(n) => format!("--protocol-{n}"),
            };
            format!("{option} {address}")
        }
        ServiceKey::Fwmark { family, mark } => match family {
            IpFamily::V4 => format!("-f {mark}"),
            IpFamily::V6 => format!("-f {mark} -6"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataplane::ipvs::mode_config::ModeConfig;
    use crate::dataplane::ipvs::plan::{HostAddresses, plan};
    use crate::testing::snapshots::{node, snapshot, svc};

    #[test]
    fn the_plan_reads_as_ipvsadm_saves_it() {
        let snap = snapshot(
            node(),
            vec![
                svc("ns/web", "10.96.0.10", 80)
                    .affinity(600)
                    .node_port(30080)
                    .ep("10.244.2.5", 8080, "node-b"),
                svc("ns/empty", "10.96.0.11", 53).proto(crate::cluster::Protocol::Udp),
                svc("ns/v6", "fd00:96::12", 80).ep("fd00:244:2::5", 8080, "node-b"),
            ],
        );
        let cfg = ModeConfig {
            scheduler: super::super::backend::netlink::Scheduler::new("mh"),
            scheduler_flags: Flags::MH_PORT,
            ..ModeConfig::default()
        };
        let host = HostAddresses::default();
        let states = [
            plan(&snap, &cfg, IpFamily::V4, &host),
            plan(&snap, &cfg, IpFamily::V6, &host),
        ];
        assert_eq!(
            render_all(&states),
            "\
# IPv4 kube-ipvs0: 10.96.0.10 10.96.0.11
-A -t 10.0.0.11:30080 -s mh -p 600 -b mh-port
-a -t 10.0.0.11:30080 -r 10.244.2.5:8080 -m -w 1
-A -t 10.96.0.10:80 -s mh -p 600 -b mh-port
-a -t 10.96.0.10:80 -r 10.244.2.5:8080 -m -w 1
# UDP 10.96.0.11:53: no endpoints: refused (TCP reset, else ICMP port unreachable)
-A -u 10.96.0.11:53 -s mh -b mh-port
# IPv6 kube-ipvs0: fd00:96::12
-A -t [fd00:96::12]:80 -s mh -b mh-port
-a -t [fd00:96::12]:80 -r [fd00:244:2::5]:8080 -m -w 1
"
        );
    }
}
