//! The decoders on dumps captured from a real IPVS kernel (Debian's 6.1 UML kernel), stored by
//! `tests/ipvs_netlink.rs` with `UPDATE_GOLDENS=1` (the file names say which case made them):
//! what that test wrote with our client, read back from the kernel's own bytes.

use crate::cluster::IpFamily;
use crate::dataplane::ipvs::backend::netlink::decode;
use crate::dataplane::ipvs::backend::netlink::uapi::{self, attr, cmd, svc};
use crate::dataplane::ipvs::backend::netlink::value::*;
use crate::netlink::attr::find;
use crate::netlink::genetlink;
use crate::netlink::message::messages;

use super::addr;

const SERVICES: &[u8] = include_bytes!("../testdata/get_service_dump_ipvs_uml_6.1.bin");
const WRR_DESTS: &[u8] =
    include_bytes!("../testdata/get_dest_dump_wrr_thresholds_ipvs_uml_6.1.bin");
const TRAFFIC_DESTS: &[u8] = include_bytes!("../testdata/get_dest_dump_traffic_ipvs_uml_6.1.bin");

/// `NLMSG_DONE`.
const DONE: u16 = 3;

/// The object messages of a captured dump (its `NLMSG_DONE` aside), each with its command.
fn objects(dump: &[u8]) -> Vec<(u8, Vec<u8>)> {
    let mut all = messages(dump);
    let mut out = Vec::new();
    let mut done = false;
    for m in all.by_ref() {
        if m.kind == DONE {
            done = true;
            continue;
        }
        let header = genetlink::header(m.body).expect("a genlmsghdr");
        out.push((header.cmd, m.body.to_vec()));
    }
    assert!(all.broken().is_none(), "whole datagrams");
    assert!(done, "the dump ends with NLMSG_DONE");
    out
}

fn key(protocol: Protocol, a: &str) -> ServiceKey {
    ServiceKey::Address {
        protocol,
        address: addr(a),
    }
}

#[test]
fn the_kernel_s_service_dump_reads_back_as_the_services_written() {
    let objects = objects(SERVICES);
    assert!(
        objects.iter().all(|(c, _)| *c == cmd::NEW_SERVICE),
        "answered as NEW_SERVICE"
    );
    // The kernel's own bytes carry what the decoder must undo or choose between.
    let first = find(genetlink::attributes(&objects[0].1), attr::SERVICE).unwrap();
    let flags = find(first, svc::FLAGS).unwrap();
    assert_ne!(
        u32::from_ne_bytes(flags[..4].try_into().unwrap()) & uapi::flags::HASHED,
        0
    );
    assert!(find(first, svc::STATS64).is_some() && find(first, svc::STATS).is_some());

    let mut got: Vec<Service> = objects
        .iter()
        .map(|(_, body)| decode::service(body).expect("decodable").service)
        .collect();
    got.sort();
    let mut sh = Service::new(key(Protocol::Tcp, "10.10.0.3:443"), "sh");
    sh.flags = Flags::SH_FALLBACK | Flags::SH_PORT;
    let mut mh = Service::new(key(Protocol::Tcp, "10.10.0.4:80"), "mh");
    mh.flags = Flags::MH_PORT | Flags::PERSISTENT;
    mh.timeout = 600;
    mh.netmask = 0xffff_ff00;
    let mut v6 = Service::new(key(Protocol::Tcp, "[fd00::1]:80"), "rr");
    v6.flags = Flags::PERSISTENT;
    v6.timeout = 10800;
    let fwmark = |family, mark| Service::new(ServiceKey::Fwmark { family, mark }, "rr");
    let mut want = vec![
        Service::new(key(Protocol::Tcp, "10.10.0.1:80"), "rr"),
        Service::new(key(Protocol::Udp, "10.10.0.2:53"), "wrr"),
        sh,
        mh,
        v6,
        Service::new(key(Protocol::Sctp, "10.10.0.5:3868"), "rr"),
        fwmark(IpFamily::V4, 42),
        fwmark(IpFamily::V6, 43),
    ];
    want.sort();
    assert_eq!(got, want);
}

#[test]
fn the_kernel_s_destination_dump_reads_weights_and_thresholds() {
    let objects = objects(WRR_DESTS);
    assert!(
        objects.iter().all(|(c, _)| *c == cmd::NEW_DEST),
        "answered as NEW_DEST"
    );
    let mut got: Vec<ListedDestination> = objects
        .iter()
        .map(|(_, body)| decode::destination(body, IpFamily::V4).expect("decodable"))
        .collect();
    got.sort_by_key(|d| d.destination);
    let idle = |destination| ListedDestination {
        destination,
        active_connections: 0,
        inactive_connections: 0,
        persistent_connections: 0,
        stats: Stats::default(),
    };
    assert_eq!(
        got,
        [
            idle(Destination {
                upper_threshold: 100,
                lower_threshold: 10,
                ..Destination::masquerade(addr("10.20.0.3:5353"), 3)
            }),
            idle(Destination::masquerade(addr("10.20.0.4:5353"), 5)),
        ]
    );
}

#[test]
fn the_kernel_s_counters_after_real_traffic_read_from_stats64() {
    // Three TCP connections closed and one held open through a NAT virtual server.
    let objects = objects(TRAFFIC_DESTS);
    let [(_, body)] = objects.as_slice() else {
        panic!("one destination: {objects:?}")
    };
    let got = decode::destination(body, IpFamily::V4).expect("decodable");
    assert_eq!(
        got.destination,
        Destination::masquerade(addr("192.168.50.2:8080"), 1)
    );
    assert_eq!(
        (
            got.active_connections,
            got.inactive_connections,
            got.persistent_connections
        ),
        (1, 3, 0)
    );
    let s = got.stats;
    assert_eq!(
        (
            s.connections,
            s.packets_in,
            s.packets_out,
            s.bytes_in,
            s.bytes_out
        ),
        (4, 18, 11, 968, 608)
    );
}
