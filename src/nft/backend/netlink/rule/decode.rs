//! An nf_tables expression list → our typed [`Rule`], the inverse of [`super::encode`].
//!
//! Pure. Recognises the shapes the encoder (and nft) make, item by item; anything else is an
//! error the caller turns into "this rule differs".

use std::net::IpAddr;

use ipnet::IpNet;

use super::{IFNAMSIZ, Layout, field_len, nat_family, padded, protocol, verdict};
use crate::nft::Name;
use crate::nft::backend::netlink::expr::{Data, Expr};
use crate::nft::backend::netlink::uapi::{self, cmp, ct, fib, meta, nat, payload, register_at};
use crate::nft::ruleset::{CtState, Family, Field, IfName, Match, Rule, Statement, Verdict};

enum Item {
    Match(Match),
    Statement(Statement),
}

/// Why an expression list is not a rule we make.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The expression that starts no match or statement we make (the list from it on is
    /// none of ours).
    #[error("{0:?}")]
    Unknown(Expr),
    /// A match after a statement: nft evaluates in order, and our rules match first.
    #[error("a match after a statement")]
    MatchAfterStatement,
    /// No expressions: no rule of ours is empty.
    #[error("an empty rule")]
    Empty,
}

/// The typed rule of an expression list, or why it is not one we make.
pub fn decode(family: Family, exprs: &[Expr]) -> Result<Rule, DecodeError> {
    let l = Layout { family };
    let mut rule = Rule::new(Vec::new(), Vec::new());
    let mut i = 0;
    while i < exprs.len() {
        let (item, used) =
            item(l, &exprs[i..]).ok_or_else(|| DecodeError::Unknown(exprs[i].clone()))?;
        match item {
            Item::Match(m) if rule.statements.is_empty() => rule.matches.push(m),
            Item::Statement(s) => rule.statements.push(s),
            Item::Match(_) => return Err(DecodeError::MatchAfterStatement),
        }
        i += used;
    }
    if rule.matches.is_empty() && rule.statements.is_empty() {
        return Err(DecodeError::Empty);
    }
    Ok(rule)
}

fn u32_ne(bytes: &[u8]) -> Option<u32> {
    Some(u32::from_ne_bytes(bytes.try_into().ok()?))
}

fn is_zero(bytes: &[u8]) -> bool {
    bytes.iter().all(|b| *b == 0)
}

/// `cmp != 0` after a `bitwise & mask ^ 0` on register 1: the mask.
fn bit_test_mask(rest: &[Expr]) -> Option<u32> {
    match rest {
        [
            Expr::Bitwise {
                sreg: 1,
                dreg: 1,
                mask,
                xor,
            },
            Expr::Cmp {
                sreg: 1,
                op: cmp::NEQ,
                data,
            },
            ..,
        ] if is_zero(xor) && is_zero(data) && data.len() == 4 => u32_ne(mask),
        _ => None,
    }
}

fn address(l: Layout, bytes: &[u8]) -> Option<IpAddr> {
    match l.family {
        Family::Ip => <[u8; 4]>::try_from(bytes).ok().map(IpAddr::from),
        Family::Ip6 => <[u8; 16]>::try_from(bytes).ok().map(IpAddr::from),
    }
}

fn field_of(l: Layout, e: &Expr, dreg: u32) -> Option<Field> {
    match e {
        Expr::Payload {
            base: payload::BASE_NETWORK,
            offset,
            len,
            dreg: d,
        } if *d == dreg && *len == l.addr_len() => [Field::Saddr, Field::Daddr]
            .into_iter()
            .find(|f| l.offset(*f) == *offset),
        Expr::Payload {
            base: payload::BASE_TRANSPORT,
            offset: 2,
            len: 2,
            dreg: d,
        } if *d == dreg => Some(Field::Dport),
        Expr::Meta {
            key: meta::L4PROTO,
            dreg: d,
        } if *d == dreg => Some(Field::L4Proto),
        Expr::Numgen {
            dreg: d,
            modulus,
            kind: uapi::numgen::RANDOM,
            offset: 0,
        } if *d == dreg => Some(Field::Random(*modulus)),
        _ => None,
    }
}

/// A run of field loads into consecutive registers from register 1: the key and the
/// expressions it took.
fn key_run(l: Layout, exprs: &[Expr]) -> (Vec<Field>, usize) {
    let mut key = Vec::new();
    let mut offset = 0;
    let mut i = 0;
    while let Some(f) = exprs
        .get(i)
        .and_then(|e| field_of(l, e, register_at(offset)))
    {
        let r = register_at(offset);
        key.push(f);
        i += 1;
        if let Some(Expr::Byteorder { sreg, dreg, .. }) = exprs.get(i)
            && *sreg == r
            && *dreg == r
            && f == Field::L4Proto
        {
            i += 1;
        }
        offset += padded(field_len(l, f));
    }
    (key, i)
}

fn item(l: Layout, e: &[Expr]) -> Option<(Item, usize)> {
    let m = |m| Some((Item::Match(m), 0));
    let s = |s| Some((Item::Statement(s), 0));
    let (item, used) = match e {
        [Expr::Ct { key, dreg: 1 }, rest @ ..] => {
            let mask = bit_test_mask(rest)?;
            let found = match (*key, mask) {
                (ct::STATE, ct::STATE_NEW) => Match::CtState(CtState::New),
                (ct::STATE, ct::STATE_INVALID) => Match::CtState(CtState::Invalid),
                (ct::STATUS, ct::STATUS_DNAT) => Match::CtStatusDnat,
                _ => return None,
            };
            (m(found)?.0, 3)
        }
        [
            Expr::Fib {
                dreg: 1,
                result: fib::RESULT_ADDRTYPE,
                flags,
            },
            Expr::Cmp {
                sreg: 1,
                op: cmp::EQ,
                data,
            },
            ..,
        ] if u32_ne(data) == Some(fib::RTN_LOCAL) => {
            let source = match *flags {
                fib::F_SADDR => true,
                fib::F_DADDR => false,
                _ => return None,
            };
            (m(Match::FibLocal { source })?.0, 2)
        }
        [
            Expr::Meta {
                key: meta::IIFNAME,
                dreg: 1,
            },
            Expr::Cmp { sreg: 1, op, data },
            ..,
        ] => {
            let negate = *op == cmp::NEQ;
            let exact = data.len() == IFNAMSIZ && data.contains(&0);
            let end = data.iter().position(|b| *b == 0).unwrap_or(data.len());
            let name = IfName::new(std::str::from_utf8(&data[..end]).ok()?, !exact)?;
            (m(Match::Iifname { name, negate })?.0, 2)
        }
        [
            Expr::Meta {
                key: meta::MARK,
                dreg: 1,
            },
            rest @ ..,
        ] => {
            if let Some(mask) = bit_test_mask(rest) {
                (m(Match::MarkSet(mask))?.0, 3)
            } else {
                let [
                    Expr::Bitwise {
                        sreg: 1,
                        dreg: 1,
                        mask,
                        xor,
                    },
                    Expr::MetaSet {
                        key: meta::MARK,
                        sreg: 1,
                    },
                    ..,
                ] = rest
                else {
                    return None;
                };
                let (mask, xor) = (u32_ne(mask)?, u32_ne(xor)?);
                let st = if mask == u32::MAX {
                    Statement::MarkXor(xor)
                } else if mask == !xor {
                    Statement::MarkOr(xor)
                } else {
                    return None;
                };
                (s(st)?.0, 3)
            }
        }
        [
            Expr::Meta {
                key: meta::L4PROTO,
                dreg: 1,
            },
            Expr::Cmp {
                sreg: 1,
                op: cmp::EQ,
                data,
            },
            rest @ ..,
        ] if data.len() == 1 => {
            let protocol = protocol(data[0])?;
            match rest {
                [
                    Expr::Immediate {
                        dreg: 1,
                        data: Data::Value(addr),
                    },
                    Expr::Immediate {
                        dreg: 2,
                        data: Data::Value(port),
                    },
                    Expr::Nat {
                        kind: nat::DNAT,
                        addr_min: Some(1),
                        proto_min: Some(2),
                        flags,
                        family,
                    },
                    ..,
                ] if *family == nat_family(l) && implied_nat_flags(*flags) => {
                    let st = Statement::DnatTo {
                        protocol,
                        addr: address(l, addr)?,
                        port: u16::from_be_bytes(port.as_slice().try_into().ok()?),
                    };
                    (s(st)?.0, 5)
                }
                _ => (m(Match::L4Proto(protocol))?.0, 2),
            }
        }
        [
            Expr::Payload {
                base: payload::BASE_NETWORK,
                offset,
                len,
                dreg: 1,
            },
            rest @ ..,
        ] if net_follows(l, *len, rest) => {
            let field = [Field::Saddr, Field::Daddr]
                .into_iter()
                .find(|f| l.offset(*f) == *offset)?;
            let (net, negate, used) = net(l, *len, rest)?;
            (m(Match::Net { field, net, negate })?.0, used + 1)
        }
        [
            Expr::Numgen {
                dreg: 1,
                modulus,
                kind: uapi::numgen::RANDOM,
                offset: 0,
            },
            Expr::Cmp {
                sreg: 1,
                op: cmp::EQ,
                data,
            },
            ..,
        ] if data.len() == 4 && is_zero(data) => (m(Match::OneIn(*modulus))?.0, 2),
        [Expr::Masq { flags }, ..] if *flags == uapi::masq::F_RANDOM_FULLY => {
            (s(Statement::Masquerade)?.0, 1)
        }
        [
            Expr::Reject {
                kind: uapi::reject::ICMP_UNREACH,
                code: Some(code),
            },
            ..,
        ] if *code == super::port_unreachable(l) => (s(Statement::Verdict(Verdict::Reject))?.0, 1),
        [
            Expr::Reject {
                kind: uapi::reject::TCP_RST,
                ..
            },
            ..,
        ] => (s(Statement::Verdict(Verdict::RejectTcpReset))?.0, 1),
        [
            Expr::Immediate {
                dreg: 0,
                data: Data::Verdict(v),
            },
            ..,
        ] => (s(Statement::Verdict(verdict(v)?))?.0, 1),
        _ => {
            let (key, used) = key_run(l, e);
            if key.is_empty() {
                return None;
            }
            return consumer(l, key, &e[used..]).map(|(item, more)| (item, used + more));
        }
    };
    Some((item, used))
}

/// Whether a network-header load at register 1 is a `Match::Net` (not the start of a key).
fn net_follows(l: Layout, len: u32, rest: &[Expr]) -> bool {
    match rest.first() {
        Some(Expr::Cmp { sreg: 1, .. }) => true,
        Some(Expr::Bitwise { sreg: 1, .. }) => len == l.addr_len(),
        _ => false,
    }
}

/// The network, negation and expressions used after the load of `len` bytes.
fn net(l: Layout, len: u32, rest: &[Expr]) -> Option<(IpNet, bool, usize)> {
    let full = l.addr_len() as usize;
    match rest {
        [Expr::Cmp { sreg: 1, op, data }, ..] if data.len() == len as usize => {
            let mut bytes = data.clone();
            bytes.resize(full, 0);
            let net = IpNet::new(address(l, &bytes)?, (len * 8) as u8).ok()?;
            Some((net, *op == cmp::NEQ, 1))
        }
        [
            Expr::Bitwise {
                sreg: 1,
                dreg: 1,
                mask,
                xor,
            },
            Expr::Cmp { sreg: 1, op, data },
            ..,
        ] if mask.len() == full && is_zero(xor) && data.len() == full => {
            let prefix: u32 = mask.iter().map(|b| b.leading_ones()).sum();
            let contiguous = mask
                .iter()
                .flat_map(|b| (0..8).rev().map(move |i| b >> i & 1))
                .skip_while(|bit| *bit == 1)
                .all(|bit| bit == 0);
            if !contiguous {
                return None;
            }
            let net = IpNet::new(address(l, data)?, prefix as u8).ok()?;
            Some((net, *op == cmp::NEQ, 2))
        }
        _ => None,
    }
}

/// NAT flags that only say which registers are given (the kernel adds them itself).
fn implied_nat_flags(flags: u32) -> bool {
    flags & !(nat::F_MAP_IPS | nat::F_PROTO_SPECIFIED) == 0
}

/// What consumes a loaded key: a lookup, a map, a dynamic set update.
fn consumer(l: Layout, key: Vec<Field>, rest: &[Expr]) -> Option<(Item, usize)> {
    match rest {
        [
            Expr::Lookup {
                set,
                sreg: 1,
                dreg: None,
                inverted,
            },
            ..,
        ] => Some((
            Item::Match(Match::InSet {
                key,
                set: Name::parse(set)?,
                negate: *inverted,
            }),
            1,
        )),
        [
            Expr::Lookup {
                set,
                sreg: 1,
                dreg: Some(0),
                inverted: false,
            },
            ..,
        ] => Some((
            Item::Statement(Statement::VerdictMap {
                key,
                map: Name::parse(set)?,
            }),
            1,
        )),
        [
            Expr::Lookup {
                set,
                sreg: 1,
                dreg: Some(1),
                inverted: false,
            },
            Expr::Nat {
                kind: nat::DNAT,
                family,
                addr_min: Some(1),
                proto_min: Some(p),
                flags,
            },
            ..,
        ] if *family == nat_family(l)
            && *p == register_at(l.addr_len())
            && implied_nat_flags(*flags) =>
        {
            Some((
                Item::Statement(Statement::DnatMap {
                    key,
                    map: Name::parse(set)?,
                }),
                2,
            ))
        }
        [
            Expr::Dynset {
                set,
                op: uapi::dynset::OP_UPDATE,
                sreg_key: 1,
            },
            ..,
        ] if key == [Field::Saddr] => Some((
            Item::Statement(Statement::RememberSource(Name::parse(set)?)),
            1,
        )),
        _ => None,
    }
}
