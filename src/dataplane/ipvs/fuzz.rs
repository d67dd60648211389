//! The IPVS mode's fuzz targets ([`crate::fuzzing`]): what the kernel answers it on its two
//! netlink sockets, IPVS (generic netlink) and rtnetlink (its dummy link and the Service
//! addresses bound to it).

use super::backend::link::message as link;
use super::backend::netlink::decode;
use crate::cluster::IpFamily;
use crate::fuzzing::Target;
use crate::fuzzing::netlink::answers;
use crate::netlink::genetlink;
use crate::netlink::message::messages;

/// What [`Mode::fuzz_targets`](crate::dataplane::mode::Mode::fuzz_targets) declares:
/// `rtnetlink` is the mode's part of the shared target of that name.
pub const TARGETS: &[Target] = &[("ipvs_netlink", ipvs_netlink), ("rtnetlink", rtnetlink)];

/// IPVS answers (services, destinations, timeouts) and the generic netlink family lookup.
fn ipvs_netlink(datagram: &[u8]) {
    for m in answers(datagram) {
        let _ = genetlink::header(m.body);
        let _ = genetlink::family(m.body);
        let _ = decode::service_key(m.body);
        let _ = decode::service(m.body);
        for family in IpFamily::ALL {
            let _ = decode::destination(m.body, family);
        }
        let _ = decode::timeouts(m.body);
    }
}

/// rtnetlink link and address answers, as the mode reads its dummy link and its addresses.
fn rtnetlink(datagram: &[u8]) {
    for m in messages(datagram) {
        let _ = link::link(&m);
        let _ = link::address(&m);
    }
}
