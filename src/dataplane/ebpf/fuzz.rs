//! The eBPF mode's fuzz targets ([`crate::fuzzing`]): the sock_diag dumps its UDP socket
//! reaper reads from the kernel.

use super::udp_sockets::diag;
use crate::fuzzing::Target;
use crate::fuzzing::netlink::answers;

/// What [`Mode::fuzz_targets`](crate::dataplane::mode::Mode::fuzz_targets) declares.
pub const TARGETS: &[Target] = &[("sock_diag", sock_diag)];

/// A sock_diag dump of UDP sockets.
fn sock_diag(datagram: &[u8]) {
    for m in answers(datagram) {
        let _ = diag::decode(m.body);
    }
}
