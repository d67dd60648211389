//! [`Tuple`]: the key or data of a set element, stored as its order-preserving encoding.
//!
//! A large table holds hundreds of thousands of elements, and the planner builds, sorts, moves
//! and drops all of them on every full plan, so their size is most of its cost. Four typed
//! [`Value`]s take 84 bytes (an address enum is 17 bytes, and every slot is as large as the
//! largest value) for a typical 10 to 30 bytes of content. A tuple is instead kept as bytes:
//! the number of values, then per value a tag and its bytes, so it takes 48 bytes, compares
//! with one `memcmp`, and sorts in the same order as the values it holds (the tag order is the
//! order of `Value`'s variants and address families). Callers still build and read typed
//! values: [`Tuple::new`] encodes, [`Tuple::values`] decodes.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::ops::Deref;

use ipnet::{IpNet, Ipv4Net, Ipv6Net};

use super::ruleset::Value;
use crate::cluster::Protocol;

/// A concatenation of up to [`Tuple::MAX`] values whose encoding fits in [`Tuple::BYTES`]:
/// every key and data our layout uses (the largest, an IPv6 address, protocol, port and IPv6
/// network of `firewall-allow`, takes 41 bytes).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Tuple {
    /// `[count, tag, bytes…, tag, bytes…, 0…]`.
    bytes: [u8; Tuple::BYTES],
}

/// Tags, in the order of `Value`'s variants and, within one, of the address families.
mod tag {
    pub const ADDR4: u8 = 0;
    pub const ADDR6: u8 = 1;
    pub const NET4: u8 = 2;
    pub const NET6: u8 = 3;
    pub const PROTO: u8 = 4;
    pub const PORT: u8 = 5;
    pub const INDEX: u8 = 6;
}

impl Tuple {
    pub const MAX: usize = 4;
    /// The whole encoding, count included.
    pub const BYTES: usize = 48;

    /// The tuple of `values`. Panics when they do not fit: the planner builds only fixed
    /// shapes that do. Values read from the kernel go through [`Tuple::try_new`].
    pub fn new(values: &[Value]) -> Tuple {
        Tuple::try_new(values).unwrap_or_else(|| panic!("values do not fit a tuple: {values:?}"))
    }

    /// The tuple of `values`, or `None` for more than [`Tuple::MAX`] values or an encoding
    /// longer than [`Tuple::BYTES`].
    pub fn try_new(values: &[Value]) -> Option<Tuple> {
        if values.len() > Tuple::MAX {
            return None;
        }
        let mut bytes = [0u8; Tuple::BYTES];
        bytes[0] = values.len() as u8;
        let mut at = 1;
        for value in values {
            let len = encoded_len(value);
            let out = bytes.get_mut(at..at + len)?;
            encode(value, out);
            at += len;
        }
        Some(Tuple { bytes })
    }

    /// The values, decoded.
    pub fn values(&self) -> Values {
        let mut parts = [Value::Index(0); Tuple::MAX];
        let len = usize::from(self.bytes[0]);
        let mut at = 1;
        for part in parts.iter_mut().take(len) {
            let (value, used) = decode(&self.bytes[at..]);
            *part = value;
            at += used;
        }
        Values {
            len: self.bytes[0],
            parts,
        }
    }

    /// How many values it holds.
    pub fn len(&self) -> usize {
        usize::from(self.bytes[0])
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The encoding, which orders tuples as they compare.
    pub fn encoding(&self) -> &[u8; Tuple::BYTES] {
        &self.bytes
    }
}

impl fmt::Debug for Tuple {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.values().iter()).finish()
    }
}

/// A tuple's values, decoded: a slice of up to four.
#[derive(Clone, Copy)]
pub struct Values {
    len: u8,
    parts: [Value; Tuple::MAX],
}

impl Values {
    pub fn as_slice(&self) -> &[Value] {
        &self.parts[..usize::from(self.len)]
    }
}

impl Deref for Values {
    type Target = [Value];

    fn deref(&self) -> &[Value] {
        self.as_slice()
    }
}

impl<'a> IntoIterator for &'a Values {
    type Item = &'a Value;
    type IntoIter = std::slice::Iter<'a, Value>;

    fn into_iter(self) -> Self::IntoIter {
        self.as_slice().iter()
    }
}

/// The length of `value`'s tag and bytes.
fn encoded_len(value: &Value) -> usize {
    match value {
        Value::Addr(IpAddr::V4(_)) | Value::Index(_) => 5,
        Value::Addr(IpAddr::V6(_)) => 17,
        Value::Net(IpNet::V4(_)) => 6,
        Value::Net(IpNet::V6(_)) => 18,
        Value::Proto(_) => 2,
        Value::Port(_) => 3,
    }
}

/// Writes the tag and bytes of `value` into `out`, which is [`encoded_len`] long.
fn encode(value: &Value, out: &mut [u8]) {
    match *value {
        Value::Addr(IpAddr::V4(a)) => {
            out[0] = tag::ADDR4;
            out[1..5].copy_from_slice(&a.octets());
        }
        Value::Addr(IpAddr::V6(a)) => {
            out[0] = tag::ADDR6;
            out[1..17].copy_from_slice(&a.octets());
        }
        Value::Net(IpNet::V4(n)) => {
            out[0] = tag::NET4;
            out[1..5].copy_from_slice(&n.addr().octets());
            out[5] = n.prefix_len();
        }
        Value::Net(IpNet::V6(n)) => {
            out[0] = tag::NET6;
            out[1..17].copy_from_slice(&n.addr().octets());
            out[17] = n.prefix_len();
        }
        Value::Proto(p) => {
            out[0] = tag::PROTO;
            out[1] = match p {
                Protocol::Tcp => 0,
                Protocol::Udp => 1,
                Protocol::Sctp => 2,
            };
        }
        Value::Port(p) => {
            out[0] = tag::PORT;
            out[1..3].copy_from_slice(&p.to_be_bytes());
        }
        Value::Index(i) => {
            out[0] = tag::INDEX;
            out[1..5].copy_from_slice(&i.to_be_bytes());
        }
    }
}

/// Reads one value written by [`encode`]; returns it and how many bytes it took. Only ever
/// reads what `encode` wrote, so every tag and length is known to be valid.
fn decode(bytes: &[u8]) -> (Value, usize) {
    let b = &bytes[1..];
    let arr4 = |b: &[u8]| -> [u8; 4] { b[..4].try_into().expect("4 bytes") };
    let arr16 = |b: &[u8]| -> [u8; 16] { b[..16].try_into().expect("16 bytes") };
    match bytes[0] {
        tag::ADDR4 => (Value::Addr(Ipv4Addr::from(arr4(b)).into()), 5),
        tag::ADDR6 => (Value::Addr(Ipv6Addr::from(arr16(b)).into()), 17),
        tag::NET4 => {
            let net = Ipv4Net::new(arr4(b).into(), b[4]).expect("encoded from a network");
            (Value::Net(net.into()), 6)
        }
        tag::NET6 => {
            let net = Ipv6Net::new(arr16(b).into(), b[16]).expect("encoded from a network");
            (Value::Net(net.into()), 18)
        }
        tag::PROTO => {
            let p = match b[0] {
                0 => Protocol::Tcp,
                1 => Protocol::Udp,
                _ => Protocol::Sctp,
            };
            (Value::Proto(p), 2)
        }
        tag::PORT => (Value::Port(u16::from_be_bytes([b[0], b[1]])), 3),
        _ => (Value::Index(u32::from_be_bytes(arr4(b))), 5),
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn value() -> impl Strategy<Value = Value> {
        let v4 = any::<[u8; 4]>().prop_map(IpAddr::from);
        let v6 = any::<[u8; 16]>().prop_map(IpAddr::from);
        let addr = prop_oneof![v4, v6];
        prop_oneof![
            addr.clone().prop_map(Value::Addr),
            (addr, any::<u8>()).prop_map(|(a, p)| {
                let len = if a.is_ipv4() { p % 33 } else { p % 129 };
                Value::Net(IpNet::new(a, len).expect("valid prefix"))
            }),
            proptest::sample::select(vec![Protocol::Tcp, Protocol::Udp, Protocol::Sctp])
                .prop_map(Value::Proto),
            any::<u16>().prop_map(Value::Port),
            any::<u32>().prop_map(Value::Index),
        ]
    }

    fn values() -> impl Strategy<Value = Vec<Value>> {
        proptest::collection::vec(value(), 0..=Tuple::MAX)
    }

    proptest! {
        #[test]
        fn values_come_back_as_they_went_in(v in values()) {
            match Tuple::try_new(&v) {
                Some(t) => {
                    let decoded = t.values();
                    prop_assert_eq!(decoded.as_slice(), v.as_slice());
                    prop_assert_eq!(t.len(), v.len());
                }
                // Only shapes larger than any key or data of our layout are refused.
                None => prop_assert!(v.len() >= 3),
            }
        }

        #[test]
        fn tuples_order_by_count_then_by_their_values(a in values(), b in values()) {
            if let (Some(ta), Some(tb)) = (Tuple::try_new(&a), Tuple::try_new(&b)) {
                let by_values = a.len().cmp(&b.len()).then_with(|| a.cmp(&b));
                prop_assert_eq!(ta.cmp(&tb), by_values);
                prop_assert_eq!(ta == tb, a == b);
            }
        }
    }

    #[test]
    fn the_largest_shape_of_our_layout_fits() {
        let v6: IpAddr = "fd00::1".parse().unwrap();
        let net: IpNet = "fd00:1::/64".parse().unwrap();
        let firewall_allow = [
            Value::Addr(v6),
            Value::Proto(Protocol::Tcp),
            Value::Port(443),
            Value::Net(net),
        ];
        let hairpin = [
            Value::Addr(v6),
            Value::Addr(v6),
            Value::Proto(Protocol::Sctp),
            Value::Port(443),
        ];
        for shape in [&firewall_allow, &hairpin] {
            assert_eq!(Tuple::new(shape).values().as_slice(), shape);
        }
        assert!(Tuple::try_new(&[Value::Net(net); 4]).is_none());
    }
}
