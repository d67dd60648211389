//! The iptables dataplane: upstream kube-proxy's chain layout, programmed with
//! `iptables-restore --noflush` (and `ip6tables-restore`), so `iptables-save` reads the same
//! under either proxy.
//!
//! # Chains
//! ```text
//!  nat   PREROUTING, OUTPUT ─→ KUBE-SERVICES ─┬ -d clusterIP --dport p ─→ KUBE-SVC-<h> | KUBE-SVL-<h>
//!                                            ├ -d externalIP / LB IP ─→ KUBE-EXT-<h> (LB with source
//!                                            │                           ranges: KUBE-FW-<h> first)
//!                                            └ (last) dst LOCAL ─────→ KUBE-NODEPORTS ─→ KUBE-EXT-<h>
//!        KUBE-SVC/SVL-<h>: [mark for masquerade] [recent affinity] statistic ─→ KUBE-SEP-<h'>
//!        KUBE-SEP-<h'>: hairpin → KUBE-MARK-MASQ; [recent --set]; DNAT
//!        POSTROUTING ─→ KUBE-POSTROUTING: marked → clear mark, MASQUERADE --random-fully
//!  filter INPUT ─→ KUBE-PROXY-FIREWALL (new), KUBE-NODEPORTS, KUBE-EXTERNAL-SERVICES (new)
//!         FORWARD ─→ KUBE-PROXY-FIREWALL (new), KUBE-FORWARD, KUBE-SERVICES (new),
//!                    KUBE-EXTERNAL-SERVICES (new)
//!         OUTPUT ─→ KUBE-PROXY-FIREWALL (new), KUBE-SERVICES (new)
//!         [INPUT, OUTPUT ─→ KUBE-FIREWALL: localnet protection, with localhost NodePorts]
//!  mangle, nat, filter: KUBE-PROXY-CANARY (empty; gone = a firewall reload flushed us)
//! ```
//! Names and hashes are upstream's ([`names`]): the same service port has the same
//! `KUBE-SVC-…` under either proxy.
//!
//! # Applying
//! [`plan::plan`] gives each family's [`Ruleset`]; [`diff::full`] (against `iptables-save`,
//! parsed by [`adopt`]) or [`diff::partial`] (against the rules last applied) give the restore
//! input, which [`render`] writes; the [`IptablesDataplane`] sends it through a [`Backend`]
//! ([`IptablesCommand`]: iptables-nft or iptables-legacy, chosen by [`flavour`] as upstream's
//! wrapper does).
//! - Start-up, the periodic full resync and the sync after a failure read the kernel: stale
//!   chains of ours are deleted, missing jumps inserted, every chain rewritten. Existing rules stay
//!   until the restore replaces them in one commit, so a restart drops no connection.
//! - Other syncs rewrite only the chains whose rules changed (per-service chains of changed
//!   service ports, and the top-level chains when a capture rule changed), and delete chains that
//!   went away; nothing is read back. Before one, each family's mangle canary is checked (as
//!   upstream's monitor does): gone means a firewall reload, and the sync is full.
//! - With iptables-nft the rules are nf_tables objects, so the shared
//!   [`monitor`](crate::dataplane::monitor), watching [`notifications::IptablesNft`],
//!   hears another program delete a table, a chain of ours or a rule in or jumping to one, and
//!   starts the repairing full sync at once ([`IptablesDataplane::watched_by`]); the canaries
//!   stay as the check for iptables-legacy, whose rules nf_tables does not see, and as a second
//!   line. Restores of [`backend::UNWATCHED_MIN_LINES`] lines or more go out with the monitor
//!   paused (see the monitor's doc).
//! - At start-up a family whose tools cannot program the host is left out
//!   ([`IptablesDataplane::keep_usable_families`]); with none left the mode does not start.
//! - Each service port's rules are one shared value in the [`Ruleset`]
//!   ([`ruleset::PortRules`]): [`plan::plan_reusing`] takes an unchanged port's rules from the
//!   previous plan, and [`diff::partial`] skips them without comparing, so a small change costs
//!   planning that change plus the fixed chains.
//! - When `iptables-save` fails (iptables-nft-save 1.8.9 segfaults at about 110,000 chains), a
//!   full sync reads our jumps with `-S CHAIN` per built-in chain and treats the previous plan's
//!   chains as the ones that may be stale.
//! - Above [`plan::LARGE_CLUSTER_ENDPOINTS`] endpoints the per-endpoint comments are left out.
//! - `--cleanup` ([`cleanup`], run with every other mode's by `dataplane::cleanup`) removes
//!   every kube-proxy `KUBE-*` chain and the jumps to it, in both flavours.
//!
//! # Parts (the mode contract of `dataplane`)
//! [`plan`](mod@plan) (pure), [`apply`] (the [`IptablesDataplane`], with [`diff`] and [`render`]),
//! [`adopt`] (`iptables-save` read back), [`parse`] (that reading as typed rules, for
//! `explain` and `status` to trace what the kernel holds), [`trace`], [`cleanup`], [`backend`] (the tools, and
//! [`flavour`]: which of them).

pub mod adopt;
pub mod apply;
pub mod backend;
pub mod cleanup;
pub mod diff;
mod fuzz;
pub mod inspect;
pub mod leftovers;
pub mod mode;
pub mod mode_config;
pub mod names;
pub mod notifications;
pub mod parse;
pub mod plan;
pub mod render;
pub mod ruleset;
pub mod trace;

#[cfg(test)]
mod golden_tests;
#[cfg(test)]
mod hostile_props;

pub use apply::{IptablesDataplane, NoUsableFamily};
pub use backend::flavour::{self, Flavour};
pub use backend::{Backend, IptablesCommand};
pub use mode_config::ModeConfig;
pub use plan::{plan, plan_reusing};
pub use ruleset::Ruleset;

/// The desired rules of both families, IPv4 first: what a sync plans.
pub fn plan_all(snapshot: &crate::cluster::Snapshot, cfg: &ModeConfig) -> [Ruleset; 2] {
    crate::cluster::IpFamily::ALL.map(|f| plan(snapshot, cfg, f))
}

/// The restore inputs that create both families' rules on a node holding nothing of ours:
/// what `plan --proxy-mode iptables` prints and the goldens hold.
pub fn render_from_scratch(rulesets: &[Ruleset]) -> String {
    let mut out = String::new();
    for r in rulesets {
        let tool = match r.family {
            crate::cluster::IpFamily::V4 => "iptables-restore",
            crate::cluster::IpFamily::V6 => "ip6tables-restore",
        };
        out.push_str(&format!("# {tool} --noflush\n"));
        out.push_str(&render::from_scratch(r));
    }
    out
}
