//! Pending set elements → a set's ordered element map, fast.
//!
//! Pure. The planner collects a hundred thousand elements in the order it visits service ports
//! and puts each set in key order once at the end; a plain sort of the elements would be most
//! of the planner's time.
//! Elements are large (a key and map data of 48 bytes each, plus the comment), so sorting the
//! elements themselves spends its time moving memory. Instead small records of the first 32
//! bytes of each key's encoding (see [`Tuple`]: exact for the common keys, an IPv4 or IPv6
//! frontend with protocol, port and index) and its position are sorted, falling back to
//! `Tuple`'s own order only when two prefixes tie. The result is exactly the order of `Tuple::cmp`, with the first added of
//! equal keys kept.

use std::collections::BTreeMap;

use crate::nft::ruleset::{Element, Tuple};

/// Elements in the order added → the element map: sorted by key, the first added of equal keys
/// kept.
///
/// Memory matters as much as time here: the largest set (a backends map, one element per
/// endpoint) is most of a full plan, and this is where a cold start peaks. So the elements are
/// put in order in their own vector (each moved once, along the permutation's cycles), the
/// sort records are dropped first, and the map is built from that vector, which
/// `BTreeMap::from_iter` takes over without a copy, so the added vector, the sort records and
/// a collected copy of the map are never alive at once.
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
    let len = elements.len();
    // `from[k]`: the position the element that goes to position `k` is at now. The later of
    // equal keys go to the end, to be cut off.
    let mut from: Vec<u32> = Vec::with_capacity(len);
    let mut dropped: Vec<u32> = Vec::new();
    for (k, &(prefix, i)) in order.iter().enumerate() {
        let same = k > 0 && {
            let (p, j) = order[k - 1];
            p == prefix && elements[j as usize].0 == elements[i as usize].0
        };
        if same {
            dropped.push(i);
        } else {
            from.push(i);
        }
    }
    drop(order);
    let kept = from.len();
    from.append(&mut dropped);
    permute(&mut elements, &mut from);
    drop(from);
    elements.truncate(kept);
    elements.into_iter().collect()
}

/// Puts `items[from[k]]` at position `k` for every `k`, in place: each cycle of the
/// permutation is followed once (`from` is used up as the record of positions done).
fn permute<T>(items: &mut [T], from: &mut [u32]) {
    for start in 0..items.len() {
        let mut k = start;
        while from[k] as usize != k {
            let src = from[k] as usize;
            from[k] = k as u32;
            if src == start {
                break;
            }
            items.swap(k, src);
            k = src;
        }
    }
}

/// The first 32 bytes of the key's encoding (which orders keys as they compare), as
/// big-endian words: equal words mean equal keys only when the rest is equal too, so ties are
/// broken by `Tuple::cmp`.
fn encode(key: &Tuple) -> [u64; 4] {
    let bytes = key.encoding();
    let word = |i: usize| u64::from_be_bytes(bytes[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
    [word(0), word(1), word(2), word(3)]
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use ipnet::IpNet;
    use proptest::prelude::*;

    use super::*;
    use crate::cluster::Protocol;
    use crate::nft::ruleset::Data;
    use crate::nft::ruleset::Value;

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
        proptest::collection::vec(value(), 0..=Tuple::MAX)
            .prop_filter_map("fits a tuple", |v| Tuple::try_new(&v))
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

        #[test]
        fn permute_puts_each_item_where_its_position_says(
            perm in Just((0u32..30).collect::<Vec<u32>>()).prop_shuffle()
        ) {
            let items: Vec<u32> = (100..130).collect();
            let mut permuted = items.clone();
            let mut from = perm.clone();
            permute(&mut permuted, &mut from);
            let want: Vec<u32> = perm.iter().map(|&i| items[i as usize]).collect();
            prop_assert_eq!(permuted, want);
        }
    }
}
