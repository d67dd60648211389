//! How traffic from this node's pods is recognised (`detectLocalMode`), and the interface names
//! it may match.
//!
//! Pure. Local traffic decides masquerading (traffic from outside the pod network is
//! masqueraded for Cluster policy) and the short cut that lets pods reach a Service with
//! `externalTrafficPolicy: Local` through its external addresses. Upstream's four modes
//! (kube-proxy's `detectLocalMode` documentation) in our words: source inside the cluster CIDR
//! of the family, source inside the Node's `spec.podCIDRs`, arrival on one bridge, or arrival on
//! any interface whose name starts with a prefix.

use std::sync::Arc;

use ipnet::IpNet;

use crate::cluster::IpFamily;

/// How local traffic is recognised, for both families.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DetectLocal {
    /// No detection: ClusterCIDR mode without a cluster CIDR.
    None,
    /// Source inside these CIDRs (ClusterCIDR mode; at most one per family).
    ClusterCidrs(Vec<IpNet>),
    /// Source inside the Node's `spec.podCIDRs`, read from the snapshot at plan time.
    NodeCidr,
    /// Arrives on this bridge, or on an interface with this prefix.
    Interface(IfName),
}

/// How one family recognises local traffic, resolved for a plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Local {
    None,
    Cidr(IpNet),
    Interface(IfName),
}

impl DetectLocal {
    /// The detection for `family`, given the Node's pod CIDRs. A CIDR mode without a CIDR of
    /// the family detects nothing in it; interface modes apply to both families.
    pub fn resolve(&self, family: IpFamily, pod_cidrs: &[IpNet]) -> Local {
        let pick = |nets: &[IpNet]| nets.iter().copied().find(|n| IpFamily::of_net(n) == family);
        match self {
            DetectLocal::None => Local::None,
            DetectLocal::ClusterCidrs(nets) => pick(nets).map_or(Local::None, Local::Cidr),
            DetectLocal::NodeCidr => pick(pod_cidrs).map_or(Local::None, Local::Cidr),
            DetectLocal::Interface(i) => Local::Interface(i.clone()),
        }
    }
}

/// An interface name, or a prefix of one, from configuration (never from an API object). Holds
/// only `[A-Za-z0-9._-]`, 1 to [`IfName::MAX_LEN`] bytes, so no rule language needs to escape it
/// and every kernel interface match accepts it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct IfName {
    name: Arc<str>,
    prefix: bool,
}

impl IfName {
    /// IFNAMSIZ - 1.
    pub const MAX_LEN: usize = 15;

    /// `None` for a name no kernel interface can have.
    pub fn new(name: &str, prefix: bool) -> Option<IfName> {
        let ok = !name.is_empty()
            && name.len() <= Self::MAX_LEN
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        ok.then(|| IfName {
            name: name.into(),
            prefix,
        })
    }

    pub fn as_str(&self) -> &str {
        &self.name
    }

    /// Matches every interface whose name starts with [`IfName::as_str`], not only that one.
    pub fn is_prefix(&self) -> bool {
        self.prefix
    }

    /// Whether an interface called `iif` matches.
    pub fn matches(&self, iif: &str) -> bool {
        if self.prefix {
            iif.starts_with(&*self.name)
        } else {
            iif == &*self.name
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interface_names_are_checked() {
        assert!(IfName::new("cbr0", false).is_some());
        assert!(IfName::new("veth", true).unwrap().matches("veth1234"));
        assert!(!IfName::new("veth", false).unwrap().matches("veth1234"));
        for bad in ["", "a b", "0123456789abcdef", "x\"y", "eth0;", "a*", "a+"] {
            assert!(IfName::new(bad, false).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn cidr_modes_pick_the_family_and_interface_modes_apply_to_both() {
        let v4: IpNet = "10.244.0.0/16".parse().unwrap();
        let v6: IpNet = "fd00:244::/48".parse().unwrap();
        let cluster = DetectLocal::ClusterCidrs(vec![v4]);
        assert_eq!(cluster.resolve(IpFamily::V4, &[]), Local::Cidr(v4));
        assert_eq!(cluster.resolve(IpFamily::V6, &[]), Local::None);
        assert_eq!(
            DetectLocal::NodeCidr.resolve(IpFamily::V6, &[v4, v6]),
            Local::Cidr(v6)
        );
        let bridge = IfName::new("cbr0", false).unwrap();
        assert_eq!(
            DetectLocal::Interface(bridge.clone()).resolve(IpFamily::V6, &[]),
            Local::Interface(bridge)
        );
    }
}
