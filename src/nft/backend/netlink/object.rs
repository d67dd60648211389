//! Tables, chains, sets and elements as nf_tables message bodies, including the userdata nft
//! keeps for itself (comments, byte orders, `typeof` expressions), so `nft list` prints our
//! objects exactly as it prints the ones the text encoder makes.
//!
//! Pure: appends attributes to a [`Writer`]; the batch decides headers and sequence numbers.

use std::net::IpAddr;

use ipnet::IpNet;

use super::expr::{self, Data as KernelData};
use super::rule::{Layout, kernel_verdict, proto_number};
use super::uapi::{self, chain, datatype, elem, hook, set, table, udata};
use crate::netlink::writer::Writer;
use crate::nft::ruleset::{
    BaseChain, ChainType, Data, DataKind, Element, Family, Hook, Kind, SetDecl, Tuple, Value,
};
use crate::nft::{self, Name};

/// One libnftnl userdata TLV.
fn tlv(out: &mut Vec<u8>, kind: u8, value: &[u8]) {
    out.push(kind);
    out.push(value.len() as u8);
    out.extend_from_slice(value);
}

/// A comment TLV: the text and its NUL.
fn comment_tlv(out: &mut Vec<u8>, kind: u8, text: &str) {
    let mut v = text.as_bytes().to_vec();
    v.push(0);
    tlv(out, kind, &v);
}

pub fn add_table(w: &mut Writer) {
    w.str(table::NAME, nft::TABLE);
    w.be32(table::FLAGS, 0);
    let mut ud = Vec::new();
    comment_tlv(&mut ud, udata::TABLE_COMMENT, nft::TABLE_COMMENT);
    w.bytes(table::USERDATA, &ud);
}

pub fn name_table(w: &mut Writer) {
    w.str(table::NAME, nft::TABLE);
}

fn hook_number(h: Hook) -> u32 {
    match h {
        Hook::Prerouting => hook::PRE_ROUTING,
        Hook::Input => hook::LOCAL_IN,
        Hook::Forward => hook::FORWARD,
        Hook::Output => hook::LOCAL_OUT,
        Hook::Postrouting => hook::POST_ROUTING,
    }
}

pub fn hook_of(n: u32) -> Option<Hook> {
    Some(match n {
        hook::PRE_ROUTING => Hook::Prerouting,
        hook::LOCAL_IN => Hook::Input,
        hook::FORWARD => Hook::Forward,
        hook::LOCAL_OUT => Hook::Output,
        hook::POST_ROUTING => Hook::Postrouting,
        _ => return None,
    })
}

pub fn chain_type_name(t: ChainType) -> &'static str {
    match t {
        ChainType::Filter => "filter",
        ChainType::Nat => "nat",
    }
}

pub fn chain(w: &mut Writer, name: &Name, base: Option<&BaseChain>) {
    w.str(chain::TABLE, nft::TABLE);
    w.str(chain::NAME, name.as_str());
    if let Some(b) = base {
        let n = w.nest(chain::HOOK);
        w.be32(chain::HOOK_NUM, hook_number(b.hook));
        w.bytes(chain::HOOK_PRIORITY, &b.priority.to_be_bytes());
        w.nest_end(n);
        w.str(chain::TYPE, chain_type_name(b.kind));
    }
}

/// nft's datatype id of one part of a key.
pub fn type_id(family: Family, k: Kind) -> u32 {
    match (k, family) {
        (Kind::Addr, Family::Ip) => datatype::IPADDR,
        (Kind::Addr, Family::Ip6) => datatype::IP6ADDR,
        (Kind::Proto, _) => datatype::INET_PROTOCOL,
        (Kind::Port, _) => datatype::INET_SERVICE,
        (Kind::Index, _) => datatype::INTEGER,
    }
}

/// Bytes of one part, unpadded.
pub fn kind_len(family: Family, k: Kind) -> u32 {
    match k {
        Kind::Addr => Layout { family }.addr_len(),
        Kind::Proto => 1,
        Kind::Port => 2,
        Kind::Index => 4,
    }
}

/// The datatype id of a concatenation: each part's id, 6 bits apiece.
pub fn concat_type(family: Family, kinds: &[Kind]) -> u32 {
    kinds.iter().fold(0, |acc, k| {
        (acc << datatype::CONCAT_BITS) | type_id(family, *k)
    })
}

/// Bytes of a key or data of these kinds: parts of a concatenation pad to 4.
pub fn kinds_len(family: Family, kinds: &[Kind]) -> u32 {
    match kinds {
        [one] => kind_len(family, *one),
        _ => kinds
            .iter()
            .map(|k| kind_len(family, *k).next_multiple_of(4))
            .sum(),
    }
}

pub fn set_flags(d: &SetDecl) -> u32 {
    let mut flags = 0;
    if d.data != DataKind::None {
        flags |= set::F_MAP;
    }
    if d.interval {
        flags |= set::F_INTERVAL;
        if d.key.len() > 1 {
            flags |= set::F_CONCAT;
        }
    }
    if d.dynamic_timeout.is_some() {
        flags |= set::F_TIMEOUT | set::F_EVAL;
    }
    flags
}

pub fn add_set(w: &mut Writer, family: Family, name: &Name, d: &SetDecl, id: u32) {
    w.str(set::TABLE, nft::TABLE);
    w.str(set::NAME, name.as_str());
    w.be32(set::FLAGS, set_flags(d));
    w.be32(set::KEY_TYPE, concat_type(family, &d.key));
    w.be32(set::KEY_LEN, kinds_len(family, &d.key));
    match &d.data {
        DataKind::None => {}
        DataKind::Values(v) => {
            w.be32(set::DATA_TYPE, concat_type(family, v));
            w.be32(set::DATA_LEN, kinds_len(family, v));
        }
        DataKind::Verdict => {
            w.be32(set::DATA_TYPE, set::DATA_VERDICT);
            w.be32(set::DATA_LEN, 0);
        }
    }
    w.be32(set::ID, id);
    if let Some(t) = d.dynamic_timeout {
        w.be64(set::TIMEOUT, u64::from(t) * 1000);
    }
    if d.interval && d.key.len() > 1 {
        let desc = w.nest(set::DESC);
        let concat = w.nest(set::DESC_CONCAT);
        for k in &d.key {
            let item = w.nest(uapi::LIST_ELEM);
            w.be32(set::FIELD_LEN, kind_len(family, *k));
            w.nest_end(item);
        }
        w.nest_end(concat);
        w.nest_end(desc);
    }
    w.bytes(set::USERDATA, &set_userdata(family, d));
}

/// What nft 1.0.6 stores in a set's userdata for the declaration `render` writes.
fn set_userdata(family: Family, d: &SetDecl) -> Vec<u8> {
    let mut ud = Vec::new();
    let concat = d.key.len() > 1;
    let typeof_ = d.key.contains(&Kind::Index);
    let key_order = if concat {
        udata::BYTEORDER_INVALID
    } else {
        udata::BYTEORDER_BIG_ENDIAN
    };
    tlv(&mut ud, udata::SET_KEYBYTEORDER, &key_order.to_ne_bytes());
    let map = d.data != DataKind::None;
    if map {
        tlv(
            &mut ud,
            udata::SET_DATABYTEORDER,
            &udata::BYTEORDER_INVALID.to_ne_bytes(),
        );
    }
    if concat {
        let fields = if typeof_ {
            typeof_fields(family, &d.key)
        } else {
            Vec::new()
        };
        tlv(
            &mut ud,
            udata::SET_KEY_TYPEOF,
            &typeof_concat(family, &fields),
        );
    }
    if let (true, DataKind::Values(v)) = (typeof_, &d.data) {
        tlv(
            &mut ud,
            udata::SET_DATA_TYPEOF,
            &typeof_concat(family, &typeof_fields(family, v)),
        );
    }
    if map {
        tlv(&mut ud, udata::SET_DATA_INTERVAL, &0u32.to_ne_bytes());
    }
    if let Some(c) = &d.comment {
        comment_tlv(&mut ud, udata::SET_COMMENT, c.as_str());
    }
    ud
}

/// The expressions `render` names in a `typeof` declaration, by kind: `ip daddr`, `meta
/// l4proto`, `th dport`, `numgen random mod 1`.
fn typeof_fields(_family: Family, kinds: &[Kind]) -> Vec<Kind> {
    kinds.to_vec()
}

/// nft's `typeof` userdata of a concatenation (empty: a `type` declaration of one).
fn typeof_concat(family: Family, kinds: &[Kind]) -> Vec<u8> {
    let mut out = Vec::new();
    tlv(
        &mut out,
        udata::TYPEOF_EXPR,
        &udata::EXPR_CONCAT.to_ne_bytes(),
    );
    let mut members = Vec::new();
    for (i, k) in kinds.iter().enumerate() {
        let (expr, data) = typeof_member(family, *k);
        let mut m = Vec::new();
        tlv(&mut m, udata::TYPEOF_EXPR, &expr.to_ne_bytes());
        tlv(&mut m, udata::TYPEOF_DATA, &data);
        tlv(&mut members, i as u8, &m);
    }
    tlv(&mut out, udata::TYPEOF_DATA, &members);
    out
}

fn typeof_member(family: Family, k: Kind) -> (u32, Vec<u8>) {
    let mut d = Vec::new();
    let pair = |d: &mut Vec<u8>, a: u32, b: u32| {
        tlv(d, 0, &a.to_ne_bytes());
        tlv(d, 1, &b.to_ne_bytes());
    };
    match k {
        Kind::Addr => {
            let (desc, field) = match family {
                Family::Ip => (udata::PROTO_DESC_IP, udata::IPHDR_DADDR),
                Family::Ip6 => (udata::PROTO_DESC_IP6, udata::IP6HDR_DADDR),
            };
            pair(&mut d, desc, field);
            (udata::EXPR_PAYLOAD, d)
        }
        Kind::Port => {
            pair(&mut d, udata::PROTO_DESC_TH, udata::THDR_DPORT);
            (udata::EXPR_PAYLOAD, d)
        }
        Kind::Proto => {
            tlv(&mut d, 0, &uapi::meta::L4PROTO.to_ne_bytes());
            (udata::EXPR_META, d)
        }
        Kind::Index => {
            pair(&mut d, uapi::numgen::RANDOM, 1);
            tlv(&mut d, 2, &0u32.to_ne_bytes());
            (udata::EXPR_NUMGEN, d)
        }
    }
}

pub fn name_set(w: &mut Writer, name: &Name) {
    w.str(set::TABLE, nft::TABLE);
    w.str(set::NAME, name.as_str());
}

fn addr_bytes(out: &mut Vec<u8>, a: IpAddr) {
    match a {
        IpAddr::V4(a) => out.extend_from_slice(&a.octets()),
        IpAddr::V6(a) => out.extend_from_slice(&a.octets()),
    }
}

/// A tuple's bytes as the kernel keys it; `end`: the last address of each network (an
/// interval's `KEY_END`) instead of the first.
pub fn tuple_bytes(t: &Tuple, end: bool) -> Vec<u8> {
    values_bytes(&t.values(), end)
}

/// [`tuple_bytes`] of values already decoded.
fn values_bytes(values: &[Value], end: bool) -> Vec<u8> {
    let concat = values.len() > 1;
    let mut out = Vec::with_capacity(values.len() * 8);
    for v in values {
        match v {
            Value::Addr(a) => addr_bytes(&mut out, *a),
            Value::Net(n) if end => addr_bytes(&mut out, n.broadcast()),
            Value::Net(n) => addr_bytes(&mut out, n.network()),
            Value::Proto(p) => out.push(proto_number(*p)),
            Value::Port(p) => out.extend_from_slice(&p.to_be_bytes()),
            Value::Index(i) => out.extend_from_slice(&i.to_ne_bytes()),
        }
        if concat {
            out.resize(out.len().next_multiple_of(4), 0);
        }
    }
    out
}

fn key(w: &mut Writer, kind: u16, bytes: &[u8]) {
    let n = w.nest(kind);
    w.bytes(uapi::data::VALUE, bytes);
    w.nest_end(n);
}

/// Elements whose networks are not a single address are ranges: start in `KEY`, end in
/// `KEY_END` (concatenated interval sets).
pub fn element(w: &mut Writer, k: &Tuple, e: Option<&Element>) {
    let item = w.nest(uapi::LIST_ELEM);
    // Decoded once: the key and, for a range, its end come from the same values.
    let values = k.values();
    key(w, elem::KEY, &values_bytes(&values, false));
    if values.iter().any(|v| matches!(v, Value::Net(_))) {
        key(w, elem::KEY_END, &values_bytes(&values, true));
    }
    if let Some(e) = e {
        let data = match &e.data {
            Data::None => None,
            Data::Values(t) => Some(KernelData::Value(tuple_bytes(t, false))),
            // `reject` cannot be map data; the batch refuses it before this point.
            Data::Verdict(v) => kernel_verdict(v).map(KernelData::Verdict),
        };
        if let Some(d) = data {
            let n = w.nest(elem::DATA);
            expr::write_data(w, &d);
            w.nest_end(n);
        }
        if let Some(c) = &e.comment {
            let mut ud = Vec::new();
            comment_tlv(&mut ud, udata::ELEM_COMMENT, c.as_str());
            w.bytes(elem::USERDATA, &ud);
        }
    }
    w.nest_end(item);
}

/// A network from the first and last address of a range, if it is one.
pub fn range_net(start: IpAddr, end: IpAddr) -> Option<IpNet> {
    let (s, e, bits) = match (start, end) {
        (IpAddr::V4(s), IpAddr::V4(e)) => (u128::from(u32::from(s)), u128::from(u32::from(e)), 32),
        (IpAddr::V6(s), IpAddr::V6(e)) => (u128::from(s), u128::from(e), 128),
        _ => return None,
    };
    let host = s ^ e;
    // host bits must be a suffix of ones, and the start must have them clear.
    if host.count_ones() != host.trailing_ones() || s & host != 0 || e & host != host {
        return None;
    }
    let prefix = bits - host.count_ones() as u8;
    IpNet::new(start, prefix).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::Protocol;

    #[test]
    fn keys_are_padded_in_concatenations_only() {
        let t = Tuple::new(&[
            Value::Addr("10.0.0.1".parse().unwrap()),
            Value::Proto(Protocol::Tcp),
            Value::Port(80),
        ]);
        assert_eq!(
            tuple_bytes(&t, false),
            [10, 0, 0, 1, 6, 0, 0, 0, 0, 80, 0, 0]
        );
        let one = Tuple::new(&[Value::Addr("10.0.0.1".parse().unwrap())]);
        assert_eq!(tuple_bytes(&one, false), [10, 0, 0, 1]);
    }

    #[test]
    fn ranges_read_back_as_networks_only_when_aligned() {
        let n = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(
            range_net(n("10.1.0.0"), n("10.1.255.255")),
            Some("10.1.0.0/16".parse().unwrap())
        );
        assert_eq!(
            range_net(n("10.1.0.1"), n("10.1.0.1")),
            Some("10.1.0.1/32".parse().unwrap())
        );
        assert_eq!(range_net(n("10.1.0.0"), n("10.1.0.2")), None);
        assert_eq!(range_net(n("10.1.0.1"), n("10.1.0.2")), None);
    }

    #[test]
    fn concatenated_types_pack_six_bits_a_part() {
        // The key type nft 1.0.6 sends for `typeof ip daddr . meta l4proto . th dport .
        // numgen random mod 1`, captured with `nft --debug=mnl`.
        let kinds = [Kind::Addr, Kind::Proto, Kind::Port, Kind::Index];
        assert_eq!(concat_type(Family::Ip, &kinds), 0x001c_c344);
        assert_eq!(kinds_len(Family::Ip, &kinds), 16);
    }
}
