//! Our nftables table as a live node's kernel holds it (the modes whose rules live in
//! nf_tables), how it differs from the plan, and drift in short for every mode.
//!
//! The reading is the adopting applier's own ([`nft::backend::Backend::dump`]), so
//! `explain` sees our table exactly as a restarted proxy would adopt it. Drift is the diff
//! from what was read to what the proxy would program now, shown as the nft commands that
//! would repair it.

use super::Error;
use crate::cluster::IpFamily;
use crate::config::NftablesEncoder;
use crate::nft::{self, Ruleset, ruleset::Family};

/// Lines of the repair script shown; the rest is counted.
pub const DRIFT_LINES: usize = 8;

/// Our nftables table of `family` as the kernel holds it (`None`: not there), in the named
/// network namespace or the caller's.
pub fn read_nftables(
    encoder: NftablesEncoder,
    netns: Option<&str>,
    family: Family,
) -> Result<Option<Ruleset>, Error> {
    let mut backend = nft::backend::for_encoder(encoder, netns);
    backend
        .dump(family)
        .map(|parsed| parsed.map(|p| p.ruleset))
        .map_err(|e| Error::kernel("reading our nftables table", e))
}

/// Our table of one family as this node's kernel holds it, for a mode whose rules (or some of
/// them) live in it: the rules its tracer walks, empty when the table is not there, so a walk
/// over a node without our table finds nothing of ours.
#[derive(Debug)]
pub struct OurTable {
    pub rules: Ruleset,
    /// Whether the table is in the kernel.
    pub found: bool,
}

impl OurTable {
    /// Our table of `family` in the caller's network namespace ([`read_nftables`]).
    pub fn read(encoder: NftablesEncoder, family: IpFamily) -> Result<OurTable, Error> {
        let family = Family::of(family);
        Ok(match read_nftables(encoder, None, family)? {
            Some(rules) => OurTable { rules, found: true },
            None => OurTable {
                rules: Ruleset::empty(family),
                found: false,
            },
        })
    }

    /// The table when it is in the kernel: what [`super::Read::beside`] names as ours.
    pub fn found(&self) -> Option<&Ruleset> {
        self.found.then_some(&self.rules)
    }

    /// How the table differs from `planned` ([`drift`]).
    pub fn drift(&self, planned: &Ruleset) -> Vec<String> {
        drift(self.found(), planned)
    }
}

/// How `kernel` differs from `planned`: empty when it holds the plan.
pub fn drift(kernel: Option<&Ruleset>, planned: &Ruleset) -> Vec<String> {
    let Some(kernel) = kernel else {
        return vec!["our table is not in the kernel: nothing of ours handles this family".into()];
    };
    let repair = nft::diff(kernel, planned);
    if repair.ops.is_empty() {
        return Vec::new();
    }
    let script = nft::render(&repair);
    let lines: Vec<&str> = script
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    shortened(
        &lines,
        &format!(
            "{} operations would bring the kernel to the plan (a sync pending, or another \
             program changed our table):",
            repair.operations()
        ),
    )
}

/// A repair script in short, for every mode alike: `heading`, its first [`DRIFT_LINES`]
/// lines, and how many more there are; empty when `lines` is.
pub fn shortened(lines: &[&str], heading: &str) -> Vec<String> {
    if lines.is_empty() {
        return Vec::new();
    }
    let mut out = vec![heading.to_string()];
    out.extend(lines.iter().take(DRIFT_LINES).map(|l| l.to_string()));
    if lines.len() > DRIFT_LINES {
        out.push(format!("… {} more lines", lines.len() - DRIFT_LINES));
    }
    out
}

/// Every base chain of the `ip`, `ip6` and `inet` tables in the kernel (`None`: the encoder
/// cannot list them), for naming other programs' chains on a packet's path.
pub fn base_chains(
    encoder: NftablesEncoder,
    netns: Option<&str>,
) -> Result<Option<Vec<nft::backend::BaseChainSummary>>, Error> {
    nft::backend::for_encoder(encoder, netns)
        .base_chains()
        .map_err(|e| Error::kernel("listing the kernel's base chains", e))
}
