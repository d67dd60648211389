//! nf_tables expressions as typed values, and their netlink form in both directions.
//!
//! Pure. Only the expressions our layout uses have variants; a dump holding another one reads
//! as [`Expr::Other`] so the rule is reported as unreadable, never refused. Registers are the
//! kernel's numbers (see [`super::uapi::register_at`]).

use super::uapi::{
    self, bitwise, byteorder, cmp, ct, data, dynset, fib, immediate, lookup, masq, meta, nat,
    numgen, payload, reject,
};
use crate::netlink::attr::{self, be32, find, find_be32, find_str};
use crate::netlink::writer::Writer;

/// A verdict as the kernel stores it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelVerdict {
    pub code: i32,
    pub chain: Option<String>,
}

/// What an immediate loads, or a map element holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Data {
    Value(Vec<u8>),
    Verdict(KernelVerdict),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Expr {
    Payload {
        base: u32,
        offset: u32,
        len: u32,
        dreg: u32,
    },
    Meta {
        key: u32,
        dreg: u32,
    },
    MetaSet {
        key: u32,
        sreg: u32,
    },
    Ct {
        key: u32,
        dreg: u32,
    },
    Cmp {
        sreg: u32,
        op: u32,
        data: Vec<u8>,
    },
    Bitwise {
        sreg: u32,
        dreg: u32,
        mask: Vec<u8>,
        xor: Vec<u8>,
    },
    Byteorder {
        sreg: u32,
        dreg: u32,
        op: u32,
        len: u32,
        size: u32,
    },
    Lookup {
        set: String,
        sreg: u32,
        dreg: Option<u32>,
        inverted: bool,
    },
    Immediate {
        dreg: u32,
        data: Data,
    },
    Numgen {
        dreg: u32,
        modulus: u32,
        kind: u32,
        offset: u32,
    },
    Nat {
        kind: u32,
        family: u32,
        addr_min: Option<u32>,
        proto_min: Option<u32>,
        flags: u32,
    },
    Masq {
        flags: u32,
    },
    /// `code` is the ICMP code; the kernel takes and dumps none for a TCP reset.
    Reject {
        kind: u32,
        code: Option<u8>,
    },
    Fib {
        dreg: u32,
        result: u32,
        flags: u32,
    },
    Dynset {
        set: String,
        op: u32,
        sreg_key: u32,
    },
    /// An expression we never make, by its kernel name.
    Other(String),
}

impl Expr {
    fn name(&self) -> &str {
        match self {
            Expr::Payload { .. } => "payload",
            Expr::Meta { .. } | Expr::MetaSet { .. } => "meta",
            Expr::Ct { .. } => "ct",
            Expr::Cmp { .. } => "cmp",
            Expr::Bitwise { .. } => "bitwise",
            Expr::Byteorder { .. } => "byteorder",
            Expr::Lookup { .. } => "lookup",
            Expr::Immediate { .. } => "immediate",
            Expr::Numgen { .. } => "numgen",
            Expr::Nat { .. } => "nat",
            Expr::Masq { .. } => "masq",
            Expr::Reject { .. } => "reject",
            Expr::Fib { .. } => "fib",
            Expr::Dynset { .. } => "dynset",
            Expr::Other(name) => name,
        }
    }
}

/// Writes `NFTA_DATA_VALUE` or `NFTA_DATA_VERDICT` into an open data nest.
pub fn write_data(w: &mut Writer, d: &Data) {
    match d {
        Data::Value(bytes) => w.bytes(data::VALUE, bytes),
        Data::Verdict(v) => {
            let n = w.nest(data::VERDICT);
            w.bytes(data::VERDICT_CODE, &v.code.to_be_bytes());
            if let Some(chain) = &v.chain {
                w.str(data::VERDICT_CHAIN, chain);
            }
            w.nest_end(n);
        }
    }
}

/// Reads the inside of a data nest.
pub fn read_data(bytes: &[u8]) -> Option<Data> {
    if let Some(value) = find(bytes, data::VALUE) {
        return Some(Data::Value(value.to_vec()));
    }
    let v = find(bytes, data::VERDICT)?;
    Some(Data::Verdict(KernelVerdict {
        code: be32(find(v, data::VERDICT_CODE)?)? as i32,
        chain: find_str(v, data::VERDICT_CHAIN).map(str::to_owned),
    }))
}

/// Writes `exprs` as the items of an open `NFTA_RULE_EXPRESSIONS` nest.
pub fn write_list(w: &mut Writer, exprs: &[Expr]) {
    for e in exprs {
        let item = w.nest(uapi::LIST_ELEM);
        w.str(uapi::expr::NAME, e.name());
        let d = w.nest(uapi::expr::DATA);
        write(w, e);
        w.nest_end(d);
        w.nest_end(item);
    }
}

fn write(w: &mut Writer, e: &Expr) {
    match e {
        Expr::Payload {
            base,
            offset,
            len,
            dreg,
        } => {
            w.be32(payload::DREG, *dreg);
            w.be32(payload::BASE, *base);
            w.be32(payload::OFFSET, *offset);
            w.be32(payload::LEN, *len);
        }
        Expr::Meta { key, dreg } => {
            w.be32(meta::KEY, *key);
            w.be32(meta::DREG, *dreg);
        }
        Expr::MetaSet { key, sreg } => {
            w.be32(meta::KEY, *key);
            w.be32(meta::SREG, *sreg);
        }
        Expr::Ct { key, dreg } => {
            w.be32(ct::KEY, *key);
            w.be32(ct::DREG, *dreg);
        }
        Expr::Cmp { sreg, op, data } => {
            w.be32(cmp::SREG, *sreg);
            w.be32(cmp::OP, *op);
            let n = w.nest(cmp::DATA);
            w.bytes(uapi::data::VALUE, data);
            w.nest_end(n);
        }
        Expr::Bitwise {
            sreg,
            dreg,
            mask,
            xor,
        } => {
            w.be32(bitwise::SREG, *sreg);
            w.be32(bitwise::DREG, *dreg);
            w.be32(bitwise::LEN, mask.len() as u32);
            let n = w.nest(bitwise::MASK);
            w.bytes(uapi::data::VALUE, mask);
            w.nest_end(n);
            let n = w.nest(bitwise::XOR);
            w.bytes(uapi::data::VALUE, xor);
            w.nest_end(n);
        }
        Expr::Byteorder {
            sreg,
            dreg,
            op,
            len,
            size,
        } => {
            w.be32(byteorder::SREG, *sreg);
            w.be32(byteorder::DREG, *dreg);
            w.be32(byteorder::OP, *op);
            w.be32(byteorder::LEN, *len);
            w.be32(byteorder::SIZE, *size);
        }
        Expr::Lookup {
            set,
            sreg,
            dreg,
            inverted,
        } => {
            w.str(lookup::SET, set);
            w.be32(lookup::SREG, *sreg);
            if let Some(d) = dreg {
                w.be32(lookup::DREG, *d);
            }
            if *inverted {
                w.be32(lookup::FLAGS, lookup::F_INV);
            }
        }
        Expr::Immediate { dreg, data } => {
            w.be32(immediate::DREG, *dreg);
            let n = w.nest(immediate::DATA);
            write_data(w, data);
            w.nest_end(n);
        }
        Expr::Numgen {
            dreg,
            modulus,
            kind,
            offset,
        } => {
            w.be32(numgen::DREG, *dreg);
            w.be32(numgen::MODULUS, *modulus);
            w.be32(numgen::TYPE, *kind);
            w.be32(numgen::OFFSET, *offset);
        }
        Expr::Nat {
            kind,
            family,
            addr_min,
            proto_min,
            flags,
        } => {
            w.be32(nat::TYPE, *kind);
            w.be32(nat::FAMILY, *family);
            if let Some(r) = addr_min {
                w.be32(nat::REG_ADDR_MIN, *r);
            }
            if let Some(r) = proto_min {
                w.be32(nat::REG_PROTO_MIN, *r);
            }
            if *flags != 0 {
                w.be32(nat::FLAGS, *flags);
            }
        }
        Expr::Masq { flags } => {
            if *flags != 0 {
                w.be32(masq::FLAGS, *flags);
            }
        }
        Expr::Reject { kind, code } => {
            w.be32(reject::TYPE, *kind);
            if let Some(code) = code {
                w.bytes(reject::ICMP_CODE, &[*code]);
            }
        }
        Expr::Fib {
            dreg,
            result,
            flags,
        } => {
            w.be32(fib::DREG, *dreg);
            w.be32(fib::RESULT, *result);
            w.be32(fib::FLAGS, *flags);
        }
        Expr::Dynset { set, op, sreg_key } => {
            w.str(dynset::SET_NAME, set);
            w.be32(dynset::OP, *op);
            w.be32(dynset::SREG_KEY, *sreg_key);
        }
        Expr::Other(_) => {}
    }
}

/// Reads an `NFTA_RULE_EXPRESSIONS` list. An expression that cannot be read becomes
/// [`Expr::Other`].
pub fn read_list(bytes: &[u8]) -> Vec<Expr> {
    attr::attrs(bytes)
        .filter(|(k, _)| *k == uapi::LIST_ELEM)
        .map(|(_, item)| {
            let name = find_str(item, uapi::expr::NAME).unwrap_or("?");
            let body = find(item, uapi::expr::DATA).unwrap_or(&[]);
            read(name, body).unwrap_or_else(|| Expr::Other(name.to_owned()))
        })
        .collect()
}

fn value_of(bytes: &[u8], kind: u16) -> Option<Vec<u8>> {
    find(find(bytes, kind)?, uapi::data::VALUE).map(<[u8]>::to_vec)
}

fn read(name: &str, b: &[u8]) -> Option<Expr> {
    let u = |k| find_be32(b, k);
    Some(match name {
        "payload" => {
            if find(b, payload::SREG).is_some() {
                return None;
            }
            Expr::Payload {
                base: u(payload::BASE)?,
                offset: u(payload::OFFSET)?,
                len: u(payload::LEN)?,
                dreg: u(payload::DREG)?,
            }
        }
        "meta" => match (u(meta::DREG), u(meta::SREG)) {
            (Some(dreg), None) => Expr::Meta {
                key: u(meta::KEY)?,
                dreg,
            },
            (None, Some(sreg)) => Expr::MetaSet {
                key: u(meta::KEY)?,
                sreg,
            },
            _ => return None,
        },
        "ct" => {
            if find(b, ct::DIRECTION).is_some() || find(b, ct::SREG).is_some() {
                return None;
            }
            Expr::Ct {
                key: u(ct::KEY)?,
                dreg: u(ct::DREG)?,
            }
        }
        "cmp" => Expr::Cmp {
            sreg: u(cmp::SREG)?,
            op: u(cmp::OP)?,
            data: value_of(b, cmp::DATA)?,
        },
        "bitwise" => {
            if u(bitwise::OP).is_some_and(|op| op != bitwise::OP_BOOL) {
                return None;
            }
            Expr::Bitwise {
                sreg: u(bitwise::SREG)?,
                dreg: u(bitwise::DREG)?,
                mask: value_of(b, bitwise::MASK)?,
                xor: value_of(b, bitwise::XOR)?,
            }
        }
        "byteorder" => Expr::Byteorder {
            sreg: u(byteorder::SREG)?,
            dreg: u(byteorder::DREG)?,
            op: u(byteorder::OP)?,
            len: u(byteorder::LEN)?,
            size: u(byteorder::SIZE)?,
        },
        "lookup" => Expr::Lookup {
            set: find_str(b, lookup::SET)?.to_owned(),
            sreg: u(lookup::SREG)?,
            dreg: u(lookup::DREG),
            inverted: u(lookup::FLAGS).unwrap_or(0) & lookup::F_INV != 0,
        },
        "immediate" => Expr::Immediate {
            dreg: u(immediate::DREG)?,
            data: read_data(find(b, immediate::DATA)?)?,
        },
        "numgen" => Expr::Numgen {
            dreg: u(numgen::DREG)?,
            modulus: u(numgen::MODULUS)?,
            kind: u(numgen::TYPE)?,
            offset: u(numgen::OFFSET).unwrap_or(0),
        },
        "nat" => {
            // The kernel dumps each maximum register equal to its minimum when none was given.
            let differs = |max, min| u(max).is_some_and(|m| Some(m) != u(min));
            if differs(nat::REG_ADDR_MAX, nat::REG_ADDR_MIN)
                || differs(nat::REG_PROTO_MAX, nat::REG_PROTO_MIN)
            {
                return None;
            }
            Expr::Nat {
                kind: u(nat::TYPE)?,
                family: u(nat::FAMILY)?,
                addr_min: u(nat::REG_ADDR_MIN),
                proto_min: u(nat::REG_PROTO_MIN),
                flags: u(nat::FLAGS).unwrap_or(0),
            }
        }
        "masq" => {
            if find(b, masq::FLAGS + 1).is_some() {
                return None;
            }
            Expr::Masq {
                flags: u(masq::FLAGS).unwrap_or(0),
            }
        }
        "reject" => Expr::Reject {
            kind: u(reject::TYPE)?,
            code: match find(b, reject::ICMP_CODE) {
                Some(c) => Some(*c.first()?),
                None => None,
            },
        },
        "fib" => Expr::Fib {
            dreg: u(fib::DREG)?,
            result: u(fib::RESULT)?,
            flags: u(fib::FLAGS)?,
        },
        "dynset" => {
            // The kernel dumps a zero timeout for "the set's own".
            let extra = [dynset::SREG_DATA, dynset::EXPR, dynset::EXPRESSIONS];
            let timeout = find(b, dynset::TIMEOUT).and_then(attr::be64).unwrap_or(0);
            if extra.iter().any(|k| find(b, *k).is_some()) || timeout != 0 {
                return None;
            }
            Expr::Dynset {
                set: find_str(b, dynset::SET_NAME)?.to_owned(),
                op: u(dynset::OP)?,
                sreg_key: u(dynset::SREG_KEY)?,
            }
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_expression_reads_back_as_written() {
        let all = vec![
            Expr::Payload {
                base: 1,
                offset: 12,
                len: 4,
                dreg: 1,
            },
            Expr::Meta { key: 16, dreg: 9 },
            Expr::MetaSet { key: 3, sreg: 1 },
            Expr::Ct { key: 0, dreg: 1 },
            Expr::Cmp {
                sreg: 1,
                op: 1,
                data: vec![0, 0, 0, 0],
            },
            Expr::Bitwise {
                sreg: 1,
                dreg: 1,
                mask: vec![8, 0, 0, 0],
                xor: vec![0; 4],
            },
            Expr::Byteorder {
                sreg: 9,
                dreg: 9,
                op: 1,
                len: 1,
                size: 2,
            },
            Expr::Lookup {
                set: "s".into(),
                sreg: 1,
                dreg: Some(0),
                inverted: true,
            },
            Expr::Immediate {
                dreg: 0,
                data: Data::Verdict(KernelVerdict {
                    code: uapi::verdict::GOTO,
                    chain: Some("c".into()),
                }),
            },
            Expr::Numgen {
                dreg: 11,
                modulus: 3,
                kind: 1,
                offset: 0,
            },
            Expr::Nat {
                kind: 1,
                family: 2,
                addr_min: Some(1),
                proto_min: Some(9),
                flags: 0,
            },
            Expr::Masq { flags: 0x10 },
            Expr::Reject {
                kind: 0,
                code: Some(3),
            },
            Expr::Reject {
                kind: 1,
                code: None,
            },
            Expr::Fib {
                dreg: 1,
                result: 3,
                flags: 1,
            },
            Expr::Dynset {
                set: "a".into(),
                op: 1,
                sreg_key: 1,
            },
        ];
        let mut w = Writer::default();
        write_list(&mut w, &all);
        assert_eq!(read_list(&w.buf), all);
    }
}
