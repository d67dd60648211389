//! Our nf_tables table as more than one mode programs it: the names of its chains and sets
//! that several modes use, and the base chains they hook.
//!
//! The nftables, ipvs and userspace modes each program the same table (`table ip|ip6
//! kube-proxy-rs`, [`crate::nft::TABLE`]): one table name for every mode, so switching a node
//! between them replaces one set of rules by the other in one transaction, and `--cleanup` has
//! one table to remove. Where a chain or set plays the same role in two modes it has one name
//! (`firewall-check`, `reject-chain`, `service-ips`, ...), defined here once.
//!
//! This is the dataplane layer, not the nf_tables library: [`crate::nft`] knows the kernel's
//! objects (tables, chains, sets, rules) and no kube-proxy chain, so it stays usable for any
//! table; these names and hooks are kube-proxy's. Nor is it one mode's folder: a mode's own
//! names and rules stay in its folder (`nftables/names.rs`, `ipvs/names.rs`,
//! `userspace/redirect/`), and only what two or more modes share lives here.

pub mod names;
pub mod skeleton;
