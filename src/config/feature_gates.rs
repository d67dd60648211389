//! The feature gates kube-proxy-rs accepts, their defaults, and how a requested set
//! (`--feature-gates` or `featureGates`) becomes the effective set.
//!
//! Upstream kube-proxy accepts the gates that matter to a service proxy plus the component-base
//! ones (logging, metrics). The names are an interface we match; stages and defaults follow the
//! Kubernetes feature-gate table as of 1.37. A gate that went GA is locked to its default, so
//! asking for the other value is an error, as upstream does. Pure: no I/O, no globals; the
//! effective set is a value the caller passes on.

use std::collections::BTreeMap;

use super::validate::{Invalid, go_bool};

/// Maturity of a gate; `AllAlpha` / `AllBeta` switch the unlocked gates of that stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Off by default, may change or go away.
    Alpha,
    /// Usually on by default.
    Beta,
    /// Graduated; locked to its default.
    Ga,
    /// Deprecated; kept so existing command lines still work.
    Deprecated,
}

/// One gate we know: its name, default and stage.
#[derive(Debug, Clone, Copy)]
pub struct Gate {
    /// The gate's name, exactly as upstream spells it.
    pub name: &'static str,
    /// Value when nobody asks otherwise.
    pub default: bool,
    /// Maturity; GA gates are locked to `default`.
    pub stage: Stage,
}

/// Turns on every alpha gate not set explicitly.
pub const ALL_ALPHA: &str = "AllAlpha";
/// Turns on every beta gate not set explicitly.
pub const ALL_BETA: &str = "AllBeta";

const fn gate(name: &'static str, default: bool, stage: Stage) -> Gate {
    Gate {
        name,
        default,
        stage,
    }
}

/// Every gate we accept, sorted by name. Adding a gate here is all it takes to accept it.
pub const KNOWN: &[Gate] = &[
    gate(ALL_ALPHA, false, Stage::Alpha),
    gate(ALL_BETA, false, Stage::Beta),
    gate("AllowServiceExternalIPs", true, Stage::Beta),
    gate("ComponentFlagz", false, Stage::Alpha),
    gate("ComponentSLIs", true, Stage::Ga),
    gate("ComponentStatusz", false, Stage::Alpha),
    gate("ContextualLogging", true, Stage::Beta),
    gate("KubeProxyDrainingTerminatingNodes", true, Stage::Ga),
    gate("KubeProxyIPVS", true, Stage::Deprecated),
    gate("KubeProxyNFTablesLocalhostNodePorts", false, Stage::Alpha),
    gate("LoadBalancerIPMode", true, Stage::Ga),
    gate("LoggingAlphaOptions", false, Stage::Alpha),
    gate("LoggingBetaOptions", true, Stage::Beta),
    gate("MinimizeIPTablesRestore", true, Stage::Ga),
    gate("MultiCIDRServiceAllocator", true, Stage::Ga),
    gate("NFTablesProxyMode", true, Stage::Ga),
    gate("PreferSameTrafficDistribution", true, Stage::Ga),
    gate("ProxyTerminatingEndpoints", true, Stage::Ga),
    gate("ServiceTrafficDistribution", true, Stage::Ga),
    gate("TopologyAwareHints", true, Stage::Ga),
    gate("WinDSR", true, Stage::Ga),
    gate("WinOverlay", true, Stage::Beta),
];

/// Looks up a gate by its exact name.
pub fn find(name: &str) -> Option<&'static Gate> {
    KNOWN.iter().find(|g| g.name == name)
}

/// The accepted names, comma-separated, for error messages.
pub fn names() -> String {
    KNOWN.iter().map(|g| g.name).collect::<Vec<_>>().join(", ")
}

/// The effective value of every known gate, given what was asked for.
///
/// `requested` holds gate name → value as written by the operator. An unknown name, or a GA
/// gate asked to leave its default, is an error: `(gate name, message)`; the caller names the
/// flag or field.
pub fn resolve(
    requested: &BTreeMap<String, bool>,
) -> Result<BTreeMap<String, bool>, (String, String)> {
    for (name, value) in requested {
        let gate = find(name).ok_or_else(|| {
            (
                name.clone(),
                format!("unknown feature gate; known gates: {}", names()),
            )
        })?;
        if gate.stage == Stage::Ga && *value != gate.default {
            return Err((
                name.clone(),
                format!(
                    "feature gate is GA and locked to {}; remove it or set it to {}",
                    gate.default, gate.default
                ),
            ));
        }
    }
    let all_alpha = requested.get(ALL_ALPHA).copied().unwrap_or(false);
    let all_beta = requested.get(ALL_BETA).copied().unwrap_or(false);
    Ok(KNOWN
        .iter()
        .map(|g| {
            let value = requested.get(g.name).copied().unwrap_or(match g.stage {
                Stage::Alpha if g.name != ALL_ALPHA => all_alpha || g.default,
                Stage::Beta if g.name != ALL_BETA => all_beta || g.default,
                _ => g.default,
            });
            (g.name.to_owned(), value)
        })
        .collect())
}

/// Parses `--feature-gates` entries `Name=bool` (already split on commas), accepting the
/// spellings Go's `strconv.ParseBool` accepts. Later entries win, as with pflag.
pub fn parse_pairs(entries: &[String]) -> Result<BTreeMap<String, bool>, Invalid> {
    let mut out = BTreeMap::new();
    for entry in entries.iter().map(|e| e.trim()).filter(|e| !e.is_empty()) {
        let (name, value) = entry
            .split_once('=')
            .ok_or_else(|| Invalid(format!("{entry:?} is not Name=true or Name=false")))?;
        let value = go_bool(value.trim())
            .map_err(|_| Invalid(format!("{entry:?}: value must be true or false")))?;
        out.insert(name.trim().to_owned(), value);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(pairs: &[(&str, bool)]) -> BTreeMap<String, bool> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()
    }

    #[test]
    fn known_table_is_sorted_and_unique() {
        let mut names: Vec<_> = KNOWN.iter().map(|g| g.name).collect();
        let before = names.clone();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names, before);
        assert!(KNOWN.iter().all(|g| g.stage != Stage::Ga || g.default));
    }

    #[test]
    fn defaults_apply_when_nothing_is_requested() {
        let got = resolve(&BTreeMap::new()).unwrap();
        assert_eq!(got.len(), KNOWN.len());
        assert!(got["NFTablesProxyMode"]);
        assert!(!got["KubeProxyNFTablesLocalhostNodePorts"]);
    }

    #[test]
    fn requests_override_defaults_and_all_alpha_switches_alpha_gates() {
        let got = resolve(&req(&[
            ("AllAlpha", true),
            ("ComponentFlagz", false),
            ("AllowServiceExternalIPs", false),
        ]))
        .unwrap();
        assert!(got["KubeProxyNFTablesLocalhostNodePorts"]);
        assert!(!got["ComponentFlagz"]);
        assert!(!got["AllowServiceExternalIPs"]);
        assert!(got["LoggingBetaOptions"]);
    }

    #[test]
    fn unknown_and_locked_gates_are_errors() {
        let (name, msg) = resolve(&req(&[("NoSuchGate", true)])).unwrap_err();
        assert_eq!(name, "NoSuchGate");
        assert!(
            msg.starts_with("unknown feature gate; known gates: AllAlpha, "),
            "{msg}"
        );
        let (name, msg) = resolve(&req(&[("NFTablesProxyMode", false)])).unwrap_err();
        assert_eq!(name, "NFTablesProxyMode");
        assert_eq!(
            msg,
            "feature gate is GA and locked to true; remove it or set it to true"
        );
        assert!(resolve(&req(&[("NFTablesProxyMode", true)])).is_ok());
    }

    #[test]
    fn parses_flag_pairs_like_pflag() {
        let got = parse_pairs(&["A=true".into(), " B = F ".into(), "".into(), "A=0".into()]);
        assert_eq!(got, Ok(req(&[("A", false), ("B", false)])));
        assert_eq!(
            parse_pairs(&["A".into()]),
            Err("\"A\" is not Name=true or Name=false".into())
        );
        assert_eq!(
            parse_pairs(&["A=yes".into()]),
            Err("\"A=yes\": value must be true or false".into())
        );
    }
}
