//! What `explain` reads from a live node's kernel, and how it tells drift.
//!
//! The reading is the adopting applier's own ([`nftables::backend::Backend::dump`]), so
//! `explain` sees our table exactly as a restarted proxy would adopt it. Drift is the diff
//! from what was read to what the proxy would program now, shown as the nft commands that
//! would repair it.

use crate::config::NftablesEncoder;
use crate::dataplane::nftables::{self, Ruleset, ruleset::Family};

/// Lines of the repair script shown; the rest is counted.
const DRIFT_LINES: usize = 8;

/// Our nftables table of `family` as the kernel holds it (`None`: not there), in the named
/// network namespace or the caller's.
pub fn read_nftables(
    encoder: NftablesEncoder,
    netns: Option<&str>,
    family: Family,
) -> Result<Option<Ruleset>, String> {
    let mut backend = nftables::backend::for_encoder(encoder, netns);
    backend
        .dump(family)
        .map(|parsed| parsed.map(|p| p.ruleset))
        .map_err(|e| {
            format!(
                "reading our nftables table: {}",
                crate::causes::one_line(&e)
            )
        })
}

/// How `kernel` differs from `planned`: empty when it holds the plan.
pub fn drift(kernel: Option<&Ruleset>, planned: &Ruleset) -> Vec<String> {
    let Some(kernel) = kernel else {
        return vec!["our table is not in the kernel: nothing of ours handles this family".into()];
    };
    let repair = nftables::diff(kernel, planned);
    if repair.ops.is_empty() {
        return Vec::new();
    }
    let script = nftables::render(&repair);
    let lines: Vec<&str> = script.lines().filter(|l| !l.trim().is_empty()).collect();
    let mut out = vec![format!(
        "{} operations would bring the kernel to the plan (a sync pending, or another program \
         changed our table):",
        repair.operations()
    )];
    out.extend(lines.iter().take(DRIFT_LINES).map(|l| l.trim().to_string()));
    if lines.len() > DRIFT_LINES {
        out.push(format!("… {} more lines", lines.len() - DRIFT_LINES));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::IpFamily;
    use crate::testing::snapshots::{node, snapshot, svc};

    #[test]
    fn drift_is_the_repair_in_short() {
        let cfg = nftables::ModeConfig::default();
        let before = snapshot(node(), vec![svc("default/web", "10.96.0.10", 80)]);
        let after = snapshot(
            node(),
            vec![svc("default/web", "10.96.0.10", 80).ep("10.244.1.2", 8080, "node-a")],
        );
        let kernel = nftables::plan::plan(&before, &cfg, IpFamily::V4);
        let planned = nftables::plan::plan(&after, &cfg, IpFamily::V4);
        assert!(drift(Some(&planned), &planned).is_empty());
        let d = drift(Some(&kernel), &planned);
        assert!(
            d[0].contains("operations would bring the kernel to the plan"),
            "{d:?}"
        );
        assert!(d.iter().any(|l| l.contains("10.244.1.2")), "{d:?}");
        assert!(d.len() <= DRIFT_LINES + 2);
        assert!(drift(None, &planned)[0].contains("not in the kernel"));
    }
}
