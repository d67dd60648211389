//! The nf_tables netlink numbers we use, as the kernel's uapi headers define them
//! (`include/uapi/linux/netfilter/nf_tables.h`, `nfnetlink.h`, `netfilter.h`), plus the few
//! userdata tags nft (libnftnl) reads to print sets and elements the way it wrote them.
//!
//! Pure constants. These are interfaces: the kernel's ABI and nft's userdata format.

#![allow(
    dead_code,
    reason = "the complete groups read better than the used subset"
)]

/// `NFNL_SUBSYS_NFTABLES`: the high byte of every nf_tables message type.
pub const SUBSYS: u16 = 10;

/// `NFT_MSG_*`.
pub mod msg {
    pub const NEWTABLE: u16 = 0;
    pub const GETTABLE: u16 = 1;
    pub const DELTABLE: u16 = 2;
    pub const NEWCHAIN: u16 = 3;
    pub const GETCHAIN: u16 = 4;
    pub const DELCHAIN: u16 = 5;
    pub const NEWRULE: u16 = 6;
    pub const GETRULE: u16 = 7;
    pub const DELRULE: u16 = 8;
    pub const NEWSET: u16 = 9;
    pub const GETSET: u16 = 10;
    pub const DELSET: u16 = 11;
    pub const NEWSETELEM: u16 = 12;
    pub const GETSETELEM: u16 = 13;
    pub const DELSETELEM: u16 = 14;
    pub const NEWGEN: u16 = 15;
    pub const GETGEN: u16 = 16;
}

/// `NFTA_GEN_ID`: the generation number in a `NEWGEN` message.
pub const GEN_ID: u16 = 1;
/// `NFTA_GEN_PROC_PID`: the pid (thread id) that committed, in a `NEWGEN` notification.
pub const GEN_PROC_PID: u16 = 2;

/// `NFPROTO_*`.
pub const NFPROTO_UNSPEC: u8 = 0;
pub const NFPROTO_INET: u8 = 1;
pub const NFPROTO_IPV4: u8 = 2;
pub const NFPROTO_IPV6: u8 = 10;

/// `NFTA_LIST_ELEM`: each item of a list attribute.
pub const LIST_ELEM: u16 = 1;

pub mod table {
    pub const NAME: u16 = 1;
    pub const FLAGS: u16 = 2;
    pub const USERDATA: u16 = 6;
}

pub mod chain {
    pub const TABLE: u16 = 1;
    pub const NAME: u16 = 3;
    pub const HOOK: u16 = 4;
    pub const POLICY: u16 = 5;
    pub const TYPE: u16 = 7;
    pub const FLAGS: u16 = 10;
    pub const HOOK_NUM: u16 = 1;
    pub const HOOK_PRIORITY: u16 = 2;
    pub const HOOK_DEV: u16 = 3;
    pub const HOOK_DEVS: u16 = 4;
    /// `NF_ACCEPT` as a chain policy.
    pub const POLICY_ACCEPT: u32 = 1;
    /// `NFT_CHAIN_HW_OFFLOAD`, `NFT_CHAIN_BINDING`: flags we never set.
    pub const FLAG_BASE: u32 = 1;
}

/// `NF_INET_*` hooks.
pub mod hook {
    pub const PRE_ROUTING: u32 = 0;
    pub const LOCAL_IN: u32 = 1;
    pub const FORWARD: u32 = 2;
    pub const LOCAL_OUT: u32 = 3;
    pub const POST_ROUTING: u32 = 4;
}

pub mod rule {
    pub const TABLE: u16 = 1;
    pub const CHAIN: u16 = 2;
    pub const HANDLE: u16 = 3;
    pub const EXPRESSIONS: u16 = 4;
    pub const USERDATA: u16 = 7;
}

pub mod expr {
    pub const NAME: u16 = 1;
    pub const DATA: u16 = 2;
}

pub mod set {
    pub const TABLE: u16 = 1;
    pub const NAME: u16 = 2;
    pub const FLAGS: u16 = 3;
    pub const KEY_TYPE: u16 = 4;
    pub const KEY_LEN: u16 = 5;
    pub const DATA_TYPE: u16 = 6;
    pub const DATA_LEN: u16 = 7;
    pub const DESC: u16 = 9;
    pub const ID: u16 = 10;
    pub const TIMEOUT: u16 = 11;
    pub const USERDATA: u16 = 13;
    pub const OBJ_TYPE: u16 = 15;
    pub const HANDLE: u16 = 16;
    pub const EXPR: u16 = 17;
    pub const EXPRESSIONS: u16 = 18;
    /// `NFTA_SET_COUNT`: how many elements the set holds (dumped by kernels since 6.x).
    pub const COUNT: u16 = 20;
    pub const DESC_CONCAT: u16 = 2;
    pub const FIELD_LEN: u16 = 1;

    pub const F_ANONYMOUS: u32 = 0x1;
    pub const F_CONSTANT: u32 = 0x2;
    pub const F_INTERVAL: u32 = 0x4;
    pub const F_MAP: u32 = 0x8;
    pub const F_TIMEOUT: u32 = 0x10;
    pub const F_EVAL: u32 = 0x20;
    pub const F_OBJECT: u32 = 0x40;
    pub const F_CONCAT: u32 = 0x80;
    pub const F_EXPR: u32 = 0x100;

    /// `NFT_DATA_VERDICT` as a map's data type.
    pub const DATA_VERDICT: u32 = 0xffff_ff00;
}

pub mod elem {
    pub const LIST_TABLE: u16 = 1;
    pub const LIST_SET: u16 = 2;
    pub const LIST_ELEMENTS: u16 = 3;
    pub const LIST_SET_ID: u16 = 4;
    pub const KEY: u16 = 1;
    pub const DATA: u16 = 2;
    pub const FLAGS: u16 = 3;
    pub const TIMEOUT: u16 = 4;
    pub const EXPIRATION: u16 = 5;
    pub const USERDATA: u16 = 6;
    pub const KEY_END: u16 = 10;
    pub const F_INTERVAL_END: u32 = 1;
}

/// `NFTA_DATA_*` and `NFTA_VERDICT_*`.
pub mod data {
    pub const VALUE: u16 = 1;
    pub const VERDICT: u16 = 2;
    pub const VERDICT_CODE: u16 = 1;
    pub const VERDICT_CHAIN: u16 = 2;
}

/// Verdict codes (`NF_DROP`, `NF_ACCEPT`, `NFT_*`).
pub mod verdict {
    pub const DROP: i32 = 0;
    pub const ACCEPT: i32 = 1;
    pub const CONTINUE: i32 = -1;
    pub const JUMP: i32 = -3;
    pub const GOTO: i32 = -4;
    pub const RETURN: i32 = -5;
}

/// Registers: `NFT_REG_VERDICT`, `NFT_REG_1..4` (16 bytes each) and `NFT_REG32_00..15`.
pub mod reg {
    pub const VERDICT: u32 = 0;
    pub const R1: u32 = 1;
    pub const R2: u32 = 2;
    pub const R32_00: u32 = 8;
}

/// Register number of a value `offset` bytes into the first 16-byte register, as nft
/// allocates them: 16-byte registers where aligned, 4-byte ones otherwise.
pub fn register_at(offset: u32) -> u32 {
    if offset.is_multiple_of(16) {
        reg::R1 + offset / 16
    } else {
        reg::R32_00 + offset / 4
    }
}

/// Byte offset of a register (the inverse of [`register_at`]); `None` for the verdict
/// register or a number no kernel has.
pub fn register_offset(register: u32) -> Option<u32> {
    match register {
        1..=4 => Some((register - 1) * 16),
        8..=23 => Some((register - 8) * 4),
        _ => None,
    }
}

pub mod payload {
    pub const DREG: u16 = 1;
    pub const BASE: u16 = 2;
    pub const OFFSET: u16 = 3;
    pub const LEN: u16 = 4;
    pub const SREG: u16 = 5;
    pub const BASE_NETWORK: u32 = 1;
    pub const BASE_TRANSPORT: u32 = 2;
}

pub mod meta {
    pub const DREG: u16 = 1;
    pub const KEY: u16 = 2;
    pub const SREG: u16 = 3;
    pub const MARK: u32 = 3;
    pub const IIFNAME: u32 = 6;
    pub const L4PROTO: u32 = 16;
}

pub mod ct {
    pub const DREG: u16 = 1;
    pub const KEY: u16 = 2;
    pub const DIRECTION: u16 = 3;
    pub const SREG: u16 = 4;
    pub const STATE: u32 = 0;
    pub const STATUS: u32 = 2;
    /// `NF_CT_STATE_INVALID_BIT` and the bit of `IP_CT_NEW`.
    pub const STATE_INVALID: u32 = 1;
    pub const STATE_NEW: u32 = 8;
    /// `IPS_DST_NAT`.
    pub const STATUS_DNAT: u32 = 0x20;
}

pub mod cmp {
    pub const SREG: u16 = 1;
    pub const OP: u16 = 2;
    pub const DATA: u16 = 3;
    pub const EQ: u32 = 0;
    pub const NEQ: u32 = 1;
}

pub mod bitwise {
    pub const SREG: u16 = 1;
    pub const DREG: u16 = 2;
    pub const LEN: u16 = 3;
    pub const MASK: u16 = 4;
    pub const XOR: u16 = 5;
    pub const OP: u16 = 6;
    pub const OP_BOOL: u32 = 0;
}

pub mod byteorder {
    pub const SREG: u16 = 1;
    pub const DREG: u16 = 2;
    pub const OP: u16 = 3;
    pub const LEN: u16 = 4;
    pub const SIZE: u16 = 5;
    pub const HTON: u32 = 1;
}

pub mod lookup {
    pub const SET: u16 = 1;
    pub const SREG: u16 = 2;
    pub const DREG: u16 = 3;
    pub const SET_ID: u16 = 4;
    pub const FLAGS: u16 = 5;
    pub const F_INV: u32 = 1;
}

pub mod immediate {
    pub const DREG: u16 = 1;
    pub const DATA: u16 = 2;
}

pub mod numgen {
    pub const DREG: u16 = 1;
    pub const MODULUS: u16 = 2;
    pub const TYPE: u16 = 3;
    pub const OFFSET: u16 = 4;
    pub const RANDOM: u32 = 1;
}

pub mod nat {
    pub const TYPE: u16 = 1;
    pub const FAMILY: u16 = 2;
    pub const REG_ADDR_MIN: u16 = 3;
    pub const REG_ADDR_MAX: u16 = 4;
    pub const REG_PROTO_MIN: u16 = 5;
    pub const REG_PROTO_MAX: u16 = 6;
    pub const FLAGS: u16 = 7;
    pub const DNAT: u32 = 1;
    /// `NF_NAT_RANGE_MAP_IPS`: the kernel adds it (and `PROTO_SPECIFIED`) for the registers
    /// given, so dumps show it.
    pub const F_MAP_IPS: u32 = 0x1;
    /// `NF_NAT_RANGE_PROTO_SPECIFIED`.
    pub const F_PROTO_SPECIFIED: u32 = 0x2;
}

pub mod masq {
    pub const FLAGS: u16 = 1;
    /// `NF_NAT_RANGE_PROTO_RANDOM_FULLY`.
    pub const F_RANDOM_FULLY: u32 = 0x10;
}

pub mod reject {
    pub const TYPE: u16 = 1;
    pub const ICMP_CODE: u16 = 2;
    pub const ICMP_UNREACH: u32 = 0;
    /// `NFT_REJECT_TCP_RST`: no ICMP code attribute.
    pub const TCP_RST: u32 = 1;
    /// ICMP port unreachable, and ICMPv6's.
    pub const PORT_UNREACH_V4: u8 = 3;
    pub const PORT_UNREACH_V6: u8 = 4;
}

pub mod fib {
    pub const DREG: u16 = 1;
    pub const RESULT: u16 = 2;
    pub const FLAGS: u16 = 3;
    pub const RESULT_ADDRTYPE: u32 = 3;
    pub const F_SADDR: u32 = 1;
    pub const F_DADDR: u32 = 2;
    /// `RTN_LOCAL`.
    pub const RTN_LOCAL: u32 = 2;
}

pub mod dynset {
    pub const SET_NAME: u16 = 1;
    pub const SET_ID: u16 = 2;
    pub const OP: u16 = 3;
    pub const SREG_KEY: u16 = 4;
    pub const SREG_DATA: u16 = 5;
    pub const TIMEOUT: u16 = 6;
    pub const EXPR: u16 = 7;
    pub const FLAGS: u16 = 9;
    pub const EXPRESSIONS: u16 = 10;
    pub const OP_UPDATE: u32 = 1;
}

/// nft's datatype ids (`enum datatypes` in nftables' `datatype.h`), which make a set's key and
/// data types; a concatenation packs them 6 bits each.
pub mod datatype {
    pub const INTEGER: u32 = 4;
    pub const IPADDR: u32 = 7;
    pub const IP6ADDR: u32 = 8;
    pub const INET_PROTOCOL: u32 = 12;
    pub const INET_SERVICE: u32 = 13;
    pub const CONCAT_BITS: u32 = 6;
}

/// libnftnl's userdata TLV tags (one byte type, one byte length): what nft stores for itself.
pub mod udata {
    pub const TABLE_COMMENT: u8 = 0;
    pub const SET_KEYBYTEORDER: u8 = 0;
    pub const SET_DATABYTEORDER: u8 = 1;
    pub const SET_KEY_TYPEOF: u8 = 3;
    pub const SET_DATA_TYPEOF: u8 = 4;
    pub const SET_DATA_INTERVAL: u8 = 6;
    pub const SET_COMMENT: u8 = 7;
    pub const ELEM_COMMENT: u8 = 0;
    /// nft's `enum byteorder`.
    pub const BYTEORDER_INVALID: u32 = 0;
    pub const BYTEORDER_BIG_ENDIAN: u32 = 2;
    /// nft's `enum expr_types` as stored in `typeof` userdata, and the tags inside.
    pub const EXPR_PAYLOAD: u32 = 7;
    pub const EXPR_META: u32 = 9;
    pub const EXPR_CONCAT: u32 = 13;
    pub const EXPR_NUMGEN: u32 = 23;
    pub const TYPEOF_EXPR: u8 = 0;
    pub const TYPEOF_DATA: u8 = 1;
    /// nft's protocol descriptions and header fields.
    pub const PROTO_DESC_TH: u32 = 11;
    pub const PROTO_DESC_IP: u32 = 12;
    pub const PROTO_DESC_IP6: u32 = 13;
    pub const IPHDR_SADDR: u32 = 11;
    pub const IPHDR_DADDR: u32 = 12;
    pub const IP6HDR_SADDR: u32 = 8;
    pub const IP6HDR_DADDR: u32 = 9;
    pub const THDR_DPORT: u32 = 2;
}
