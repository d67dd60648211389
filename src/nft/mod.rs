//! The nf_tables library: our table as typed values, and everything between those values and
//! the kernel. The nftables mode programs its whole layout with it; the ipvs mode its helper
//! rules and the userspace mode its redirect rules. It knows no mode's chains or sets: each
//! mode's planner builds the [`Ruleset`] (its names in its own `names.rs`), and this library
//! compares, sends, reads back and walks whatever that ruleset holds.
//!
//! - [`ruleset`] (with [`tuple`](mod@tuple) and [`name`]): the desired or read-back state of
//!   one table, plain data, and the steps every planner builds one with
//!   ([`Ruleset::add_base_chains`], [`Ruleset::push`], [`Ruleset::element`],
//!   [`ruleset::SetDecl::plain`]);
//! - [`diff`](mod@diff): (last applied, desired) → the smallest [`Transaction`], ordered so the
//!   kernel accepts it in one batch; [`rebuild`] when the table held objects we cannot name;
//! - [`render`](mod@render): a transaction as `nft -f -` text (the `--nftables-encoder=nft`
//!   path, `plan`'s output, and the text quoted in errors);
//! - [`adopt`]: `nft -j list table` JSON read back into a ruleset;
//! - [`backend`]: the kernel seam ([`Backend`]): [`backend::netlink`] encodes transactions as
//!   one nf_tables netlink batch and reads the table back from `GET*` dumps; [`NftCommand`]
//!   runs `nft`;
//! - [`apply`]: the [`apply::Applier`], which sends transactions, adopts the kernel's table on
//!   a full sync and knows when the next apply must read the kernel;
//! - [`trace`]: walks a ruleset with one packet, as the kernel would (tests, `explain`).
//!
//! Why it is written here: no maintained crate under a licence we may use (`deny.toml`: no
//! GPL, LGPL or AGPL) speaks nf_tables without linking libnftnl (GPL), and the rust-netlink
//! family has no nf_tables messages; `nft` itself is far slower than the kernel at both
//! applying and listing a large table (docs/benchmarks.md). The socket and the netlink framing
//! come from [`crate::netlink`]; nf_tables' objects and expressions are in
//! [`backend::netlink`].
//!
//! Pure except [`backend`]: everything else is values in, values out, tested without root.

pub mod adopt;
pub mod apply;
pub mod backend;
pub mod diff;
pub mod name;
pub mod render;
pub mod ruleset;
pub mod trace;
pub mod tuple;

pub use backend::{Backend, NftCommand};
pub use diff::{Added, Op, Transaction, diff, rebuild};
pub use name::Name;
pub use render::{Encoder, NftText, render, render_all, render_from_scratch};
pub use ruleset::{Family, Ruleset};

/// The one table kube-proxy-rs programs, in the `ip` and the `ip6` family. Whichever mode runs
/// owns it: the nftables mode's rules, the ipvs mode's helper rules or the userspace mode's
/// redirect rules. Not upstream's `kube-proxy`, so that either can be removed without touching
/// the other.
pub const TABLE: &str = "kube-proxy-rs";
/// The table's comment, shown by `nft list tables`-style tools.
pub const TABLE_COMMENT: &str = "rules for kube-proxy-rs";
