//! The decoders on kernel-shaped answers, and what a refusal means.

use super::*;
use crate::cluster::IpFamily;
use crate::dataplane::ipvs::backend::netlink::client::{Error, refusal};
use crate::dataplane::ipvs::backend::netlink::decode::{self, Undecodable};
use crate::dataplane::ipvs::backend::netlink::encode::Request;
use crate::dataplane::ipvs::backend::netlink::value::*;

#[test]
fn a_dumped_service_reads_back_without_hashed_and_with_its_64_bit_counters() {
    // As ip_vs_genl_fill_service writes it: 16-byte address, HASHED set, a mask of ~0, the
    // 32-bit counters (which wrap) and the 64-bit ones, with a pad attribute between.
    #[rustfmt::skip]
    let bytes = answer(1 /* NEW_SERVICE */, &[nest(1, &[
        nla(1, &2u16.to_ne_bytes()),
        nla(2, &6u16.to_ne_bytes()),
        nla(3, &v4_union([10, 96, 0, 10])),
        nla(4, &[0x01, 0xbb]),
        nla(6, b"wrr\0"),
        nla(7, &[0x3u32.to_ne_bytes(), u32::MAX.to_ne_bytes()].concat()), // PERSISTENT|HASHED
        nla(8, &10800u32.to_ne_bytes()),
        nla(9, &[255, 255, 255, 255]),
        nest(10 /* IPVS_SVC_ATTR_STATS */, &[
            nla(1, &7u32.to_ne_bytes()),
            nla(4, &1u64.to_ne_bytes()),
        ]),
        nest(12 /* IPVS_SVC_ATTR_STATS64 */, &[
            nla(1 /* CONNS */, &5_000_000_000u64.to_ne_bytes()),
            nla(2 /* INPKTS */, &20u64.to_ne_bytes()),
            nla(3 /* OUTPKTS */, &18u64.to_ne_bytes()),
            nla(11 /* PAD */, &[]),
            nla(4 /* INBYTES */, &1200u64.to_ne_bytes()),
            nla(5 /* OUTBYTES */, &3400u64.to_ne_bytes()),
            nla(6 /* CPS */, &2u64.to_ne_bytes()),
            nla(10 /* OUTBPS */, &99u64.to_ne_bytes()),
        ]),
    ])]);
    let got = decode::service(&bytes).unwrap();
    assert_eq!(
        got.service,
        Service {
            key: ServiceKey::Address {
                protocol: Protocol::Tcp,
                address: addr("10.96.0.10:443"),
            },
            scheduler: Scheduler::new("wrr"),
            flags: Flags::PERSISTENT,
            timeout: 10800,
            netmask: u32::MAX,
        }
    );
    assert_eq!(
        got.stats,
        Stats {
            connections: 5_000_000_000,
            packets_in: 20,
            packets_out: 18,
            bytes_in: 1200,
            bytes_out: 3400,
            connection_rate: 2,
            byte_rate_out: 99,
            ..Stats::default()
        }
    );
}

#[test]
fn an_old_kernel_s_32_bit_counters_are_read_when_there_are_no_64_bit_ones() {
    #[rustfmt::skip]
    let bytes = answer(1, &[nest(1, &[
        nla(1, &10u16.to_ne_bytes()),
        nla(5, &42u32.to_ne_bytes()),
        nla(6, b"rr\0"),
        nla(9, &64u32.to_ne_bytes()),
        nest(10, &[
            nla(1, &3u32.to_ne_bytes()),
            nla(2, &9u32.to_ne_bytes()),
            nla(5 /* OUTBYTES, u64 even here */, &(1u64 << 33).to_ne_bytes()),
        ]),
    ])]);
    let got = decode::service(&bytes).unwrap();
    assert_eq!(
        got.service.key,
        ServiceKey::Fwmark {
            family: IpFamily::V6,
            mark: 42
        }
    );
    assert_eq!(
        (got.service.flags, got.service.timeout, got.service.netmask),
        (Flags::NONE, 0, 64)
    );
    assert_eq!(
        (
            got.stats.connections,
            got.stats.packets_in,
            got.stats.bytes_out
        ),
        (3, 9, 1 << 33)
    );
}

#[test]
fn a_dumped_destination_reads_its_connection_counts_and_counters() {
    #[rustfmt::skip]
    let bytes = answer(5 /* NEW_DEST */, &[nest(2, &[
        nla(1, &v4_union([10, 244, 1, 5])),
        nla(2, &[0x1f, 0x90]),
        nla(3, &0u32.to_ne_bytes()),
        nla(4, &0u32.to_ne_bytes()),
        nla(5, &0u32.to_ne_bytes()),
        nla(6, &0u32.to_ne_bytes()),
        nla(7 /* ACTIVE_CONNS */, &1u32.to_ne_bytes()),
        nla(8 /* INACT_CONNS */, &4u32.to_ne_bytes()),
        nla(9 /* PERSIST_CONNS */, &2u32.to_ne_bytes()),
        nla(11, &2u16.to_ne_bytes()),
        nest(12, &[nla(1, &5u64.to_ne_bytes()), nla(2, &31u64.to_ne_bytes())]),
    ])]);
    let got = decode::destination(&bytes, IpFamily::V4).unwrap();
    assert_eq!(
        got.destination,
        Destination::masquerade(addr("10.244.1.5:8080"), 0)
    );
    assert_eq!(
        (
            got.active_connections,
            got.inactive_connections,
            got.persistent_connections
        ),
        (1, 4, 2)
    );
    assert_eq!((got.stats.connections, got.stats.packets_in), (5, 31));
}

#[test]
fn a_destination_without_its_own_family_takes_its_service_s() {
    // Kernels before 3.18 send no IPVS_DEST_ATTR_ADDR_FAMILY.
    let fd00_9 = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9];
    let bytes = answer(
        5,
        &[nest(
            2,
            &[
                nla(1, &fd00_9),
                nla(2, &[0, 80]),
                nla(3, &3u32.to_ne_bytes()),
            ],
        )],
    );
    let got = decode::destination(&bytes, IpFamily::V6).unwrap();
    assert_eq!(got.destination.address, addr("[fd00::9]:80"));
    assert_eq!(got.destination.forwarding, Forwarding::DirectRoute);
}

#[test]
fn messages_that_do_not_say_what_they_are_are_undecodable_with_a_reason() {
    let reason = |r: Result<ListedService, Undecodable>| r.unwrap_err().reason;
    assert_eq!(
        reason(decode::service(&answer(1, &[]))),
        "no service attribute"
    );
    assert_eq!(
        reason(decode::service(&answer(
            1,
            &[nest(1, &[nla(1, &7u16.to_ne_bytes())])]
        ))),
        "address family 7"
    );
    assert_eq!(
        reason(decode::service(&answer(
            1,
            &[nest(
                1,
                &[
                    nla(1, &2u16.to_ne_bytes()),
                    nla(2, &6u16.to_ne_bytes()),
                    nla(3, &[10, 0])
                ]
            )]
        ))),
        "no address",
        "an address shorter than its family's"
    );
    assert_eq!(
        reason(decode::service(&answer(
            1,
            &[nest(
                1,
                &[nla(1, &2u16.to_ne_bytes()), nla(5, &1u32.to_ne_bytes())]
            )]
        ))),
        "FWM 1 IPv4: no scheduler"
    );
    let no_port = answer(5, &[nest(2, &[nla(1, &v4_union([10, 0, 0, 1]))])]);
    assert_eq!(
        decode::destination(&no_port, IpFamily::V4)
            .unwrap_err()
            .to_string(),
        "undecodable IPVS destination: 10.0.0.1: no port"
    );
    assert_eq!(decode::timeouts(&[1, 1]), Timeouts::default());
}

#[test]
fn the_kernel_s_timeouts_answer_reads_back() {
    let bytes = answer(
        12, /* SET_CONFIG */
        &[nla(4, &900u32.to_ne_bytes()), nla(6, &300u32.to_ne_bytes())],
    );
    assert_eq!(
        decode::timeouts(&bytes),
        Timeouts {
            tcp: 900,
            tcp_fin: 0,
            udp: 300
        }
    );
}

#[test]
fn a_refused_service_names_the_scheduler_the_kernel_has_no_module_for() {
    let s = Service::new(
        ServiceKey::Address {
            protocol: Protocol::Tcp,
            address: addr("10.0.0.1:80"),
        },
        "nosuch",
    );
    let e = refusal(&Request::NewService(s.clone()), 2, None);
    assert!(matches!(e, Error::UnknownScheduler { ref scheduler, .. } if scheduler == "nosuch"));
    assert_eq!(
        e.to_string(),
        "the kernel has no IPVS scheduler \"nosuch\" (no module ip_vs_nosuch), adding service TCP 10.0.0.1:80 (scheduler nosuch)"
    );
    let e = refusal(&Request::SetService(s.clone()), 3, None);
    assert_eq!(e.errno(), Some(3));
    assert!(
        e.to_string()
            .starts_with("the kernel refused updating service TCP 10.0.0.1:80 (scheduler nosuch): No such process"),
        "{e}"
    );
    let e = refusal(
        &Request::DelDest(s.key, addr("10.1.0.1:80")),
        2,
        Some("dest not found".into()),
    );
    assert!(
        e.to_string().ends_with(": dest not found")
            && e.to_string()
                .contains("deleting destination 10.1.0.1:80 of service TCP 10.0.0.1:80"),
        "{e}"
    );
}
