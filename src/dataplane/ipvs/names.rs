//! Every kernel-visible name the IPVS mode makes, each defined once with what it matches.
//!
//! Pure constants. Other files of the mode use these and never spell a name themselves.

/// The dummy link that holds every bound service address: upstream's `kube-ipvs0`
/// (`notes/ipvs.md` §1.2). The same name, so a node switched between the two proxies finds
/// and keeps (or cleans up) the other's link.
pub const DUMMY_LINK: &str = "kube-ipvs0";
