//! Round trips: a request decodes to the object it carries; no input panics a decoder.

use std::net::SocketAddr;

use proptest::prelude::*;

use super::*;
use crate::cluster::IpFamily;
use crate::dataplane::ipvs::backend::netlink::decode;
use crate::dataplane::ipvs::backend::netlink::encode::Request;
use crate::dataplane::ipvs::backend::netlink::uapi;
use crate::dataplane::ipvs::backend::netlink::value::*;

fn ip() -> impl Strategy<Value = std::net::IpAddr> {
    prop_oneof![
        any::<[u8; 4]>().prop_map(std::net::IpAddr::from),
        any::<[u8; 16]>().prop_map(std::net::IpAddr::from),
    ]
}

fn key() -> impl Strategy<Value = ServiceKey> {
    let protocol = prop_oneof![
        Just(Protocol::Tcp),
        Just(Protocol::Udp),
        Just(Protocol::Sctp),
        any::<u16>().prop_map(Protocol::from_number),
    ];
    prop_oneof![
        (protocol, ip(), any::<u16>()).prop_map(|(protocol, ip, port)| ServiceKey::Address {
            protocol,
            address: SocketAddr::new(ip, port),
        }),
        (any::<bool>(), 1..u32::MAX).prop_map(|(v6, mark)| ServiceKey::Fwmark {
            family: if v6 { IpFamily::V6 } else { IpFamily::V4 },
            mark,
        }),
    ]
}

fn service() -> impl Strategy<Value = Service> {
    (
        key(),
        "[a-z]{1,15}",
        any::<u32>(),
        any::<u32>(),
        any::<u32>(),
    )
        .prop_map(|(key, scheduler, flags, timeout, netmask)| Service {
            key,
            scheduler: Scheduler(scheduler),
            flags: Flags(flags & !uapi::flags::HASHED),
            timeout,
            netmask,
        })
}

fn destination() -> impl Strategy<Value = Destination> {
    (
        ip(),
        any::<u16>(),
        any::<u32>(),
        any::<u32>(),
        any::<u32>(),
        any::<u32>(),
    )
        .prop_map(
            |(ip, port, fwd, weight, upper_threshold, lower_threshold)| Destination {
                address: SocketAddr::new(ip, port),
                forwarding: Forwarding::from_number(fwd),
                weight,
                upper_threshold,
                lower_threshold,
            },
        )
}

proptest! {
    #[test]
    fn a_service_request_decodes_to_the_service_it_carries(s in service(), seq in any::<u32>()) {
        for request in [Request::NewService(s.clone()), Request::SetService(s.clone())] {
            let bytes = request.encode(FAMILY, seq);
            let got = decode::service(&body(&bytes)).unwrap();
            prop_assert_eq!(&got.service, &s);
            prop_assert_eq!(got.stats, Stats::default());
        }
    }

    #[test]
    fn a_destination_request_decodes_to_its_service_key_and_destination(
        key in key(),
        d in destination(),
    ) {
        let bytes = Request::NewDest(key, d).encode(FAMILY, 1);
        let b = body(&bytes);
        let got = decode::destination(&b, key.family()).unwrap();
        prop_assert_eq!(got.destination, d);
        // The service nest carries the key alone; it reads back as the same key.
        prop_assert_eq!(decode::service_key(&b), Ok(key));
    }

    #[test]
    fn timeouts_round_trip(tcp in any::<u32>(), tcp_fin in any::<u32>(), udp in any::<u32>()) {
        let t = Timeouts { tcp, tcp_fin, udp };
        prop_assert_eq!(decode::timeouts(&body(&Request::SetConfig(t).encode(FAMILY, 1))), t);
    }

    #[test]
    fn arbitrary_bytes_never_panic_the_decoders(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = decode::service(&bytes);
        let _ = decode::destination(&bytes, IpFamily::V4);
        let _ = decode::destination(&bytes, IpFamily::V6);
        let _ = decode::timeouts(&bytes);
    }
}
