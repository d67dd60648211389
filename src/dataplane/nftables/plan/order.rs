//! Pending set elements → a set's ordered element map, fast.
//!
//! Pure. The planner collects a hundred thousand elements in the order it visits service ports
//! and puts each set in key order once at the end; this sort was most of the planner's time.
//! Elements are large (a [`Tuple`] holds four 20-byte values) and `Tuple`'s derived order
//! compares value by value through enum tags, so sorting the elements themselves spends its time
//! moving memory and branching. Instead each key is encoded once into 32 order-preserving bytes
//! (exact for the common keys: an IPv4 or IPv6 frontend with protocol, port and index), and
//! small (encoding, position) records are sorted, falling back to `Tuple`'s own order only when
//! two encodings tie. The result is exactly the order of `Tuple::cmp`, with the first added of
//! equal keys kept.

use std::collections::BTreeMap;
use std::net::IpAddr;

use ipnet::IpNet;

use crate::cluster::Protocol;
use crate::dataplane::nftables::ruleset::{Data, Element, Tuple, Value};

/// Elements in the order added → the element map: sorted by key, the first added of equal keys
/// kept.
pub(super) fn sorted(mut elements: Vec<(Tuple, Element)>) -> BTreeMap<Tuple, Element> {
    let mut order: Vec<([u64; 4], u32)> = elements
        .iter()
        .enumerate()
        .map(|(i, (key, _))| (encode(key), i as u32))
        .collect();
    // Positions are unique, so an unstable sort is deterministic and keeps the first added
    // first among equal keys.
    order.sort_unstable_by(|a, b| {
        a.0.cmp(&b.0)
            .then_with(|| elements[a.1 as usize].0.cmp(&elements[b.1 as usize].0))
            .then(a.1.cmp(&b.1))
    });
    order.dedup_by(|later, first| {
        later.0 == first.0 && elements[later.1 as usize].0 == elements[first.1 as usize].0
    });
    order
        .into_iter()
        .map(|(_, i)| {
            let (key, element) = &mut elements[i as usize];
            let taken = std::mem::replace(
                element,
                Element {
                    data: Data::None,
                    comment: None,
                },
            );
            (*key, taken)
        })
        .collect()
}

/// The first 32 bytes of an order-preserving encoding of `key`, as big-endian words: the
/// length, then per value a tag (variant and family, in `Value`'s order) and its bytes. Equal
/// encodings mean equal keys only when the encoding fits, so ties are broken by `Tuple::cmp`.
fn encode(key: &Tuple) -> [u64; 4] {
    let mut buf = [0u8; 32];
    let mut at = 0;
    let mut put = |bytes: &[u8]| {
        for &b in bytes {
            if at < buf.len() {
                buf[at] = b;
                at += 1;
            }
        }
    };
    let values = key.values();
    put(&[values.len() as u8]);
    for value in values {
        match *value {
            Value::Addr(IpAddr::V4(a)) => {
                put(&[0]);
                put(&a.octets());
            }
            Value::Addr(IpAddr::V6(a)) => {
                put(&[1]);
                put(&a.octets());
            }
            Value::Net(IpNet::V4(n)) => {
                put(&[2]);
                put(&n.addr().octets());
                put(&[n.prefix_len()]);
            }
            Value::Net(IpNet::V6(n)) => {
                put(&[3]);
                put(&n.addr().octets());
                put(&[n.prefix_len()]);
            }
            Value::Proto(p) => put(&[
                4,
                match p {
                    Protocol::Tcp => 0,
                    Protocol::Udp => 1,
                    Protocol::Sctp => 2,
                },
            ]),
            Value::Port(p) => {
                put(&[5]);
                put(&p.to_be_bytes());
            }
            Value::Index(i) => {
                put(&[6]);
                put(&i.to_be_bytes());
            }
        }
    }
    let word = |i: usize| u64::from_be_bytes(buf[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
    [word(0), word(1), word(2), word(3)]
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn value() -> impl Strategy<Value = Value> {
        let v4 = (0u8..3, 0u8..3).prop_map(|(a, b)| IpAddr::from([10, 0, a, b]));
        let v6 = (0u16..3, 0u16..3).prop_map(|(a, b)| IpAddr::from([0xfd00, 0, 0, 0, 0, 0, a, b]));
        let addr = prop_oneof![v4, v6];
        prop_oneof![
            addr.clone().prop_map(Value::Addr),
            (addr, 0u8..3).prop_map(|(a, p)| {
                let len = if a.is_ipv4() { 30 + p } else { 126 + p };
                Value::Net(IpNet::new(a, len).unwrap())
            }),
            proptest::sample::select(vec![Protocol::Tcp, Protocol::Udp, Protocol::Sctp])
                .prop_map(Value::Proto),
            (0u16..3).prop_map(|p| Value::Port(p * 300)),
            (0u32..3).prop_map(|i| Value::Index(i * 70_000)),
        ]
    }

    fn tuple() -> impl Strategy<Value = Tuple> {
        proptest::collection::vec(value(), 0..=Tuple::MAX).prop_map(|v| Tuple::new(&v))
    }

    proptest! {
        #[test]
        fn encodings_order_keys_as_tuples_do(a in tuple(), b in tuple()) {
            let by_encoding = encode(&a).cmp(&encode(&b));
            if by_encoding.is_ne() {
                prop_assert_eq!(by_encoding, a.cmp(&b));
            }
        }

        #[test]
        fn sorted_keeps_the_first_added_of_equal_keys(keys in proptest::collection::vec(tuple(), 0..40)) {
            let elements: Vec<(Tuple, Element)> = keys
                .iter()
                .enumerate()
                .map(|(i, k)| (*k, Element { data: Data::Values(Tuple::new(&[Value::Index(i as u32)])), comment: None }))
                .collect();
            let mut want = BTreeMap::new();
            for (k, e) in elements.clone() {
                want.entry(k).or_insert(e);
            }
            prop_assert_eq!(sorted(elements), want);
        }
    }
}
