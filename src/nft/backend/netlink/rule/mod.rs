//! A typed [`Rule`] ↔ its nf_tables expression list, shaped exactly as nft 1.0.6 shapes the
//! same rule text, so `nft list` shows the rule the text encoder would have made.
//!
//! Pure. [`encode`] is total; [`decode`] (in `decode.rs`) knows exactly the shapes
//! [`encode`] makes (and the equivalent ones nft makes) and calls anything else unreadable,
//! which the caller turns into "this rule differs".

use std::net::IpAddr;

use super::expr::{Data, Expr, KernelVerdict};
use super::uapi::{self, cmp, ct, fib, meta, nat, payload, reg, register_at, verdict as code};
use crate::cluster::Protocol;
use crate::nft::Name;
use crate::nft::ruleset::{CtState, Family, Field, Match, Rule, Statement, Verdict};

mod decode;
pub use decode::{DecodeError, decode};

/// IFNAMSIZ: an exact interface name is compared with its NUL padding.
pub(super) const IFNAMSIZ: usize = 16;

/// Family-specific header layout.
#[derive(Clone, Copy)]
pub struct Layout {
    pub family: Family,
}

impl Layout {
    pub fn addr_len(self) -> u32 {
        match self.family {
            Family::Ip => 4,
            Family::Ip6 => 16,
        }
    }
    pub(super) fn offset(self, f: Field) -> u32 {
        match (self.family, f) {
            (Family::Ip, Field::Saddr) => 12,
            (Family::Ip, _) => 16,
            (Family::Ip6, Field::Saddr) => 8,
            (Family::Ip6, _) => 24,
        }
    }
    pub fn nfproto(self) -> u8 {
        match self.family {
            Family::Ip => uapi::NFPROTO_IPV4,
            Family::Ip6 => uapi::NFPROTO_IPV6,
        }
    }
}

/// Bytes a field takes in a register (concatenations pad each part to 4).
pub fn field_len(layout: Layout, f: Field) -> u32 {
    match f {
        Field::Saddr | Field::Daddr => layout.addr_len(),
        Field::L4Proto => 1,
        Field::Dport => 2,
        Field::Random(_) => 4,
    }
}

pub(super) fn padded(len: u32) -> u32 {
    len.next_multiple_of(4)
}

pub fn proto_number(p: Protocol) -> u8 {
    match p {
        Protocol::Tcp => 6,
        Protocol::Udp => 17,
        Protocol::Sctp => 132,
    }
}

pub fn protocol(n: u8) -> Option<Protocol> {
    match n {
        6 => Some(Protocol::Tcp),
        17 => Some(Protocol::Udp),
        132 => Some(Protocol::Sctp),
        _ => None,
    }
}

/// The expressions of `rule`. `interval` tells whether a set is an interval set: nft converts
/// a protocol's byte order when it looks one up in an interval concatenation.
pub fn encode(family: Family, rule: &Rule, interval: &dyn Fn(&Name) -> bool) -> Vec<Expr> {
    let l = Layout { family };
    let mut out = Vec::with_capacity(8);
    for m in &rule.matches {
        encode_match(l, m, interval, &mut out);
    }
    for s in &rule.statements {
        encode_statement(l, s, &mut out);
    }
    out
}

fn load(l: Layout, f: Field, dreg: u32) -> Expr {
    match f {
        Field::Saddr | Field::Daddr => Expr::Payload {
            base: payload::BASE_NETWORK,
            offset: l.offset(f),
            len: l.addr_len(),
            dreg,
        },
        Field::L4Proto => Expr::Meta {
            key: meta::L4PROTO,
            dreg,
        },
        Field::Dport => Expr::Payload {
            base: payload::BASE_TRANSPORT,
            offset: 2,
            len: 2,
            dreg,
        },
        Field::Random(n) => Expr::Numgen {
            dreg,
            modulus: n,
            kind: uapi::numgen::RANDOM,
            offset: 0,
        },
    }
}

/// Loads a key into registers from `NFT_REG_1` on; returns the bytes it takes.
fn load_key(l: Layout, key: &[Field], hton_proto: bool, out: &mut Vec<Expr>) -> u32 {
    let mut offset = 0;
    for f in key {
        let r = register_at(offset);
        out.push(load(l, *f, r));
        if hton_proto && *f == Field::L4Proto {
            out.push(Expr::Byteorder {
                sreg: r,
                dreg: r,
                op: uapi::byteorder::HTON,
                len: 1,
                size: 2,
            });
        }
        offset += padded(field_len(l, *f));
    }
    offset
}

fn cmp_op(negate: bool) -> u32 {
    if negate { cmp::NEQ } else { cmp::EQ }
}

/// `<load>; bitwise & mask ^ 0; cmp != 0`: a bit test.
fn bit_test(out: &mut Vec<Expr>, load: Expr, mask: u32) {
    out.push(load);
    out.push(Expr::Bitwise {
        sreg: reg::R1,
        dreg: reg::R1,
        mask: mask.to_ne_bytes().to_vec(),
        xor: vec![0; 4],
    });
    out.push(Expr::Cmp {
        sreg: reg::R1,
        op: cmp::NEQ,
        data: vec![0; 4],
    });
}

fn addr_bytes(a: IpAddr) -> Vec<u8> {
    match a {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    }
}

fn encode_match(l: Layout, m: &Match, interval: &dyn Fn(&Name) -> bool, out: &mut Vec<Expr>) {
    match m {
        Match::CtState(state) => {
            let bit = match state {
                CtState::New => ct::STATE_NEW,
                CtState::Invalid => ct::STATE_INVALID,
            };
            let load = Expr::Ct {
                key: ct::STATE,
                dreg: reg::R1,
            };
            bit_test(out, load, bit);
        }
        Match::CtStatusDnat => {
            let load = Expr::Ct {
                key: ct::STATUS,
                dreg: reg::R1,
            };
            bit_test(out, load, ct::STATUS_DNAT);
        }
        Match::FibLocal { source } => {
            out.push(Expr::Fib {
                dreg: reg::R1,
                result: fib::RESULT_ADDRTYPE,
                flags: if *source { fib::F_SADDR } else { fib::F_DADDR },
            });
            out.push(Expr::Cmp {
                sreg: reg::R1,
                op: cmp::EQ,
                data: fib::RTN_LOCAL.to_ne_bytes().to_vec(),
            });
        }
        Match::Net { field, net, negate } => {
            let full = l.addr_len() * 8;
            let prefix = u32::from(net.prefix_len());
            let network = addr_bytes(net.network());
            let offset = l.offset(*field);
            let load = |len| Expr::Payload {
                base: payload::BASE_NETWORK,
                offset,
                len,
                dreg: reg::R1,
            };
            if prefix == full {
                out.push(load(l.addr_len()));
                out.push(Expr::Cmp {
                    sreg: reg::R1,
                    op: cmp_op(*negate),
                    data: network,
                });
            } else if prefix > 0 && prefix.is_multiple_of(8) {
                let bytes = prefix / 8;
                out.push(load(bytes));
                out.push(Expr::Cmp {
                    sreg: reg::R1,
                    op: cmp_op(*negate),
                    data: network[..bytes as usize].to_vec(),
                });
            } else {
                out.push(load(l.addr_len()));
                out.push(Expr::Bitwise {
                    sreg: reg::R1,
                    dreg: reg::R1,
                    mask: addr_bytes(net.netmask()),
                    xor: vec![0; l.addr_len() as usize],
                });
                out.push(Expr::Cmp {
                    sreg: reg::R1,
                    op: cmp_op(*negate),
                    data: network,
                });
            }
        }
        Match::Iifname { name, negate } => {
            out.push(Expr::Meta {
                key: meta::IIFNAME,
                dreg: reg::R1,
            });
            let mut data = name.as_str().as_bytes().to_vec();
            if !name.is_prefix() {
                data.resize(IFNAMSIZ, 0);
            }
            out.push(Expr::Cmp {
                sreg: reg::R1,
                op: cmp_op(*negate),
                data,
            });
        }
        Match::InSet { key, set, negate } => {
            load_key(l, key, interval(set) && key.len() > 1, out);
            out.push(Expr::Lookup {
                set: set.as_str().to_owned(),
                sreg: reg::R1,
                dreg: None,
                inverted: *negate,
            });
        }
        Match::MarkSet(mask) => {
            let load = Expr::Meta {
                key: meta::MARK,
                dreg: reg::R1,
            };
            bit_test(out, load, *mask);
        }
        Match::L4Proto(p) => {
            out.push(load(l, Field::L4Proto, reg::R1));
            out.push(Expr::Cmp {
                sreg: reg::R1,
                op: cmp::EQ,
                data: vec![proto_number(*p)],
            });
        }
        Match::OneIn(n) => {
            out.push(load(l, Field::Random(*n), reg::R1));
            out.push(Expr::Cmp {
                sreg: reg::R1,
                op: cmp::EQ,
                data: vec![0; 4],
            });
        }
    }
}

fn mark_update(out: &mut Vec<Expr>, mask: u32, xor: u32) {
    out.push(Expr::Meta {
        key: meta::MARK,
        dreg: reg::R1,
    });
    out.push(Expr::Bitwise {
        sreg: reg::R1,
        dreg: reg::R1,
        mask: mask.to_ne_bytes().to_vec(),
        xor: xor.to_ne_bytes().to_vec(),
    });
    out.push(Expr::MetaSet {
        key: meta::MARK,
        sreg: reg::R1,
    });
}

/// The ICMP code of "port unreachable" in the table's family: plain `reject`.
pub(super) fn port_unreachable(l: Layout) -> u8 {
    match l.family {
        Family::Ip => uapi::reject::PORT_UNREACH_V4,
        Family::Ip6 => uapi::reject::PORT_UNREACH_V6,
    }
}

/// A verdict as the kernel stores it; `None` for the rejects, which are statements.
pub fn kernel_verdict(v: &Verdict) -> Option<KernelVerdict> {
    let (code, chain) = match v {
        Verdict::Accept => (code::ACCEPT, None),
        Verdict::Drop => (code::DROP, None),
        Verdict::Return => (code::RETURN, None),
        Verdict::Jump(c) => (code::JUMP, Some(c.as_str().to_owned())),
        Verdict::Goto(c) => (code::GOTO, Some(c.as_str().to_owned())),
        Verdict::Reject | Verdict::RejectTcpReset => return None,
    };
    Some(KernelVerdict { code, chain })
}

/// The inverse of [`kernel_verdict`].
pub fn verdict(v: &KernelVerdict) -> Option<Verdict> {
    let chain = || v.chain.as_deref().and_then(Name::parse);
    Some(match v.code {
        code::ACCEPT => Verdict::Accept,
        code::DROP => Verdict::Drop,
        code::RETURN => Verdict::Return,
        code::JUMP => Verdict::Jump(chain()?),
        code::GOTO => Verdict::Goto(chain()?),
        _ => return None,
    })
}

pub(super) fn nat_family(l: Layout) -> u32 {
    u32::from(l.nfproto())
}

fn encode_statement(l: Layout, s: &Statement, out: &mut Vec<Expr>) {
    match s {
        Statement::MarkOr(m) => mark_update(out, !m, *m),
        Statement::MarkXor(m) => mark_update(out, u32::MAX, *m),
        Statement::RememberSource(set) => {
            out.push(load(l, Field::Saddr, reg::R1));
            out.push(Expr::Dynset {
                set: set.as_str().to_owned(),
                op: uapi::dynset::OP_UPDATE,
                sreg_key: reg::R1,
            });
        }
        Statement::DnatTo {
            protocol,
            addr,
            port,
        } => {
            encode_match(l, &Match::L4Proto(*protocol), &|_| false, out);
            out.push(Expr::Immediate {
                dreg: reg::R1,
                data: Data::Value(addr_bytes(*addr)),
            });
            out.push(Expr::Immediate {
                dreg: reg::R2,
                data: Data::Value(port.to_be_bytes().to_vec()),
            });
            out.push(Expr::Nat {
                kind: nat::DNAT,
                family: nat_family(l),
                addr_min: Some(reg::R1),
                proto_min: Some(reg::R2),
                flags: nat::F_PROTO_SPECIFIED,
            });
        }
        Statement::DnatMap { key, map } => {
            load_key(l, key, false, out);
            out.push(Expr::Lookup {
                set: map.as_str().to_owned(),
                sreg: reg::R1,
                dreg: Some(reg::R1),
                inverted: false,
            });
            out.push(Expr::Nat {
                kind: nat::DNAT,
                family: nat_family(l),
                addr_min: Some(reg::R1),
                proto_min: Some(register_at(l.addr_len())),
                flags: 0,
            });
        }
        Statement::Masquerade => out.push(Expr::Masq {
            flags: uapi::masq::F_RANDOM_FULLY,
        }),
        Statement::Verdict(Verdict::Reject) => out.push(Expr::Reject {
            kind: uapi::reject::ICMP_UNREACH,
            code: Some(port_unreachable(l)),
        }),
        Statement::Verdict(Verdict::RejectTcpReset) => out.push(Expr::Reject {
            kind: uapi::reject::TCP_RST,
            code: None,
        }),
        Statement::Verdict(v) => {
            if let Some(kv) = kernel_verdict(v) {
                out.push(Expr::Immediate {
                    dreg: reg::VERDICT,
                    data: Data::Verdict(kv),
                });
            }
        }
        Statement::VerdictMap { key, map } => {
            load_key(l, key, false, out);
            out.push(Expr::Lookup {
                set: map.as_str().to_owned(),
                sreg: reg::R1,
                dreg: Some(reg::VERDICT),
                inverted: false,
            });
        }
    }
}

#[cfg(test)]
mod tests;
