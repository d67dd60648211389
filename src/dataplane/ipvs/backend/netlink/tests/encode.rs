//! The encoder, byte by byte.

use super::*;
use crate::cluster::IpFamily;
use crate::dataplane::ipvs::backend::netlink::encode::Request;
use crate::dataplane::ipvs::backend::netlink::value::*;
use crate::netlink::genetlink::{self, Header};
use crate::netlink::message::messages;

#[test]
fn a_new_tcp_service_carries_its_key_then_scheduler_flags_timeout_and_netmask() {
    let s = Service::new(
        ServiceKey::Address {
            protocol: Protocol::Tcp,
            address: addr("10.0.0.1:80"),
        },
        "rr",
    );
    #[rustfmt::skip]
    let want = message(ACKED, 1, 1 /* IPVS_CMD_NEW_SERVICE */, &[nest(1 /* IPVS_CMD_ATTR_SERVICE */, &[
        nla(1 /* IPVS_SVC_ATTR_AF */, &2u16.to_ne_bytes()), // AF_INET
        nla(2 /* IPVS_SVC_ATTR_PROTOCOL */, &6u16.to_ne_bytes()), // IPPROTO_TCP
        nla(3 /* IPVS_SVC_ATTR_ADDR */, &v4_union([10, 0, 0, 1])),
        nla(4 /* IPVS_SVC_ATTR_PORT */, &[0, 80]), // network order
        nla(6 /* IPVS_SVC_ATTR_SCHED_NAME */, b"rr\0"),
        // struct ip_vs_flags { flags, mask }: no flag, every bit ours
        nla(7 /* IPVS_SVC_ATTR_FLAGS */, &[0u32.to_ne_bytes(), u32::MAX.to_ne_bytes()].concat()),
        nla(8 /* IPVS_SVC_ATTR_TIMEOUT */, &0u32.to_ne_bytes()),
        nla(9 /* IPVS_SVC_ATTR_NETMASK */, &[255, 255, 255, 255]), // IPv4: a be32 mask
    ])]);
    let got = Request::NewService(s).encode(FAMILY, 1);
    assert_eq!(got.len(), 104, "16 + 4 + a nest of 84");
    assert_eq!(got, want);
}

#[test]
fn an_updated_sh_service_sets_persistence_and_both_scheduler_flags() {
    let mut s = Service::new(
        ServiceKey::Address {
            protocol: Protocol::Udp,
            address: addr("192.0.2.7:53"),
        },
        "sh",
    );
    s.flags = Flags::PERSISTENT | Flags::SH_FALLBACK | Flags::SH_PORT;
    s.timeout = 600;
    s.netmask = 0xffff_ff00;
    #[rustfmt::skip]
    let want = message(ACKED, 4, 2 /* IPVS_CMD_SET_SERVICE */, &[nest(1, &[
        nla(1, &2u16.to_ne_bytes()),
        nla(2, &17u16.to_ne_bytes()), // IPPROTO_UDP
        nla(3, &v4_union([192, 0, 2, 7])),
        nla(4, &[0, 53]),
        nla(6, b"sh\0"),
        // IP_VS_SVC_F_PERSISTENT 0x1 | SCHED1 (sh-fallback) 0x8 | SCHED2 (sh-port) 0x10
        nla(7, &[0x19u32.to_ne_bytes(), u32::MAX.to_ne_bytes()].concat()),
        nla(8, &600u32.to_ne_bytes()),
        nla(9, &[255, 255, 255, 0]),
    ])]);
    assert_eq!(Request::SetService(s).encode(FAMILY, 4), want);
}

#[test]
fn an_ipv6_service_s_netmask_is_a_prefix_length_in_host_order() {
    let mut s = Service::new(
        ServiceKey::Address {
            protocol: Protocol::Sctp,
            address: addr("[fd00::1]:3868"),
        },
        "mh",
    );
    s.flags = Flags::MH_PORT;
    let fd00_1 = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
    #[rustfmt::skip]
    let want = message(ACKED, 2, 1, &[nest(1, &[
        nla(1, &10u16.to_ne_bytes()), // AF_INET6
        nla(2, &132u16.to_ne_bytes()), // IPPROTO_SCTP
        nla(3, &fd00_1),
        nla(4, &3868u16.to_be_bytes()),
        nla(6, b"mh\0"),
        nla(7, &[0x10u32.to_ne_bytes(), u32::MAX.to_ne_bytes()].concat()), // mh-port = SCHED2
        nla(8, &0u32.to_ne_bytes()),
        nla(9, &128u32.to_ne_bytes()),
    ])]);
    assert_eq!(Request::NewService(s).encode(FAMILY, 2), want);
}

#[test]
fn a_destination_of_a_fwmark_service_names_the_service_by_family_and_mark_only() {
    let key = ServiceKey::Fwmark {
        family: IpFamily::V6,
        mark: 43,
    };
    let d = Destination {
        address: addr("[fd00::2]:8080"),
        forwarding: Forwarding::Masquerade,
        weight: 5,
        upper_threshold: 100,
        lower_threshold: 10,
    };
    let fd00_2 = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
    #[rustfmt::skip]
    let want = message(ACKED, 9, 5 /* IPVS_CMD_NEW_DEST */, &[
        nest(1, &[
            nla(1, &10u16.to_ne_bytes()),
            nla(5 /* IPVS_SVC_ATTR_FWMARK */, &43u32.to_ne_bytes()),
        ]),
        nest(2 /* IPVS_CMD_ATTR_DEST */, &[
            nla(1 /* IPVS_DEST_ATTR_ADDR */, &fd00_2),
            nla(2 /* IPVS_DEST_ATTR_PORT */, &[0x1f, 0x90]), // 8080
            nla(3 /* IPVS_DEST_ATTR_FWD_METHOD */, &0u32.to_ne_bytes()), // IP_VS_CONN_F_MASQ
            nla(4 /* IPVS_DEST_ATTR_WEIGHT */, &5u32.to_ne_bytes()),
            nla(5 /* IPVS_DEST_ATTR_U_THRESH */, &100u32.to_ne_bytes()),
            nla(6 /* IPVS_DEST_ATTR_L_THRESH */, &10u32.to_ne_bytes()),
            nla(11 /* IPVS_DEST_ATTR_ADDR_FAMILY */, &10u16.to_ne_bytes()),
        ]),
    ]);
    let got = Request::NewDest(key, d).encode(FAMILY, 9);
    assert_eq!(got.len(), 112);
    assert_eq!(got, want);
}

#[test]
fn deleting_a_destination_sends_only_what_identifies_it() {
    let key = ServiceKey::Address {
        protocol: Protocol::Tcp,
        address: addr("10.0.0.1:80"),
    };
    #[rustfmt::skip]
    let want = message(ACKED, 3, 7 /* IPVS_CMD_DEL_DEST */, &[
        nest(1, &[
            nla(1, &2u16.to_ne_bytes()),
            nla(2, &6u16.to_ne_bytes()),
            nla(3, &v4_union([10, 0, 0, 1])),
            nla(4, &[0, 80]),
        ]),
        nest(2, &[
            nla(1, &v4_union([10, 1, 0, 9])),
            nla(2, &[0x1f, 0x90]),
            nla(11, &2u16.to_ne_bytes()),
        ]),
    ]);
    assert_eq!(
        Request::DelDest(key, addr("10.1.0.9:8080")).encode(FAMILY, 3),
        want
    );
}

#[test]
fn dumps_ask_with_the_dump_flag_and_destinations_name_their_service() {
    assert_eq!(
        Request::GetServices.encode(FAMILY, 5),
        message(DUMP, 5, 4 /* IPVS_CMD_GET_SERVICE */, &[])
    );
    let key = ServiceKey::Address {
        protocol: Protocol::Udp,
        address: addr("[fd00::1]:53"),
    };
    let fd00_1 = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
    #[rustfmt::skip]
    let service = nest(1, &[
        nla(1, &10u16.to_ne_bytes()),
        nla(2, &17u16.to_ne_bytes()),
        nla(3, &fd00_1),
        nla(4, &[0, 53]),
    ]);
    let want = message(
        DUMP,
        6,
        8, /* IPVS_CMD_GET_DEST */
        std::slice::from_ref(&service),
    );
    assert_eq!(Request::GetDests(key).encode(FAMILY, 6), want);
    // One service by its key: the same command and service nest, acknowledged, not a dump.
    let want = message(ACKED, 7, 4 /* IPVS_CMD_GET_SERVICE */, &[service]);
    assert_eq!(Request::GetService(key).encode(FAMILY, 7), want);
    assert!(!Request::GetService(key).is_dump());
    assert_eq!(
        Request::DelService(ServiceKey::Fwmark {
            family: IpFamily::V4,
            mark: 7
        })
        .encode(FAMILY, 8),
        message(
            ACKED,
            8,
            3,
            &[nest(
                1,
                &[nla(1, &2u16.to_ne_bytes()), nla(5, &7u32.to_ne_bytes())]
            )]
        )
    );
}

#[test]
fn config_requests_carry_the_three_timeouts_at_the_top_level() {
    let t = Timeouts {
        tcp: 900,
        tcp_fin: 120,
        udp: 300,
    };
    #[rustfmt::skip]
    let want = message(ACKED, 2, 12 /* IPVS_CMD_SET_CONFIG */, &[
        nla(4 /* IPVS_CMD_ATTR_TIMEOUT_TCP */, &900u32.to_ne_bytes()),
        nla(5 /* IPVS_CMD_ATTR_TIMEOUT_TCP_FIN */, &120u32.to_ne_bytes()),
        nla(6 /* IPVS_CMD_ATTR_TIMEOUT_UDP */, &300u32.to_ne_bytes()),
    ]);
    assert_eq!(Request::SetConfig(t).encode(FAMILY, 2), want);
    assert_eq!(
        Request::GetConfig.encode(FAMILY, 3),
        message(ACKED, 3, 13, &[])
    );
    assert_eq!(Request::Flush.encode(FAMILY, 4), message(ACKED, 4, 17, &[]));
}

#[test]
fn every_request_is_a_generic_netlink_message_of_the_ipvs_family_and_version() {
    for r in [Request::GetServices, Request::Flush, Request::GetConfig] {
        let bytes = r.encode(FAMILY, 77);
        let m = messages(&bytes).next().unwrap();
        assert_eq!((m.kind, m.seq), (FAMILY, 77));
        assert_eq!(
            genetlink::header(m.body),
            Some(Header {
                cmd: r.command(),
                version: 1
            })
        );
    }
}
