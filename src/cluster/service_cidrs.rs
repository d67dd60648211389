//! The cluster's Service CIDRs: the ranges ClusterIPs are allocated from, as the ServiceCIDR
//! objects (`networking.k8s.io/v1`) name them.
//!
//! Pure. The nftables mode drops new connections to an address inside these ranges that no
//! Service holds, as upstream's nftables mode does, so a client of a deleted Service (or a
//! mistyped address) fails at once instead of leaving the node. Each object's CIDRs are kept
//! under its name and the union is what a [`Snapshot`](super::Snapshot) carries: two objects
//! naming the same range (a range moving from one object to another) keep it until both are gone.

use std::collections::BTreeMap;
use std::str::FromStr as _;
use std::sync::Arc;

use ipnet::IpNet;
use k8s_openapi::api::networking::v1::ServiceCIDR;

use super::warning::Warning;

/// Every ServiceCIDR object's ranges, by object name.
#[derive(Clone, Debug, Default)]
pub struct ServiceCidrs {
    by_name: BTreeMap<String, Vec<IpNet>>,
    /// The union of `by_name`, sorted, without duplicates.
    union: Arc<[IpNet]>,
}

impl ServiceCidrs {
    /// Records one object's current ranges; a range that does not parse is skipped with a
    /// warning naming the object and the field.
    pub fn apply(&mut self, object: &ServiceCIDR, warnings: &mut Vec<Warning>) {
        let name = object.metadata.name.clone().unwrap_or_default();
        let cidrs = object.spec.as_ref().and_then(|s| s.cidrs.as_ref());
        let mut nets = Vec::new();
        for (i, text) in cidrs.into_iter().flatten().enumerate() {
            match IpNet::from_str(text) {
                Ok(net) => nets.push(net.trunc()),
                Err(_) => warnings.push(Warning::new(
                    &format!("servicecidr {name}"),
                    format!(
                        "spec.cidrs[{i}] {text:?} is not a CIDR; that range is not known as a \
                         Service CIDR"
                    ),
                )),
            }
        }
        if self.by_name.get(&name) != Some(&nets) {
            self.by_name.insert(name, nets);
            self.rebuild();
        }
    }

    /// Forgets the object called `name`.
    pub fn remove(&mut self, name: &str) {
        if self.by_name.remove(name).is_some() {
            self.rebuild();
        }
    }

    /// Keeps only the objects whose name `keep` accepts (the end of a list).
    pub fn retain(&mut self, keep: impl Fn(&str) -> bool) {
        let before = self.by_name.len();
        self.by_name.retain(|name, _| keep(name));
        if self.by_name.len() != before {
            self.rebuild();
        }
    }

    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    /// Every range of every object, sorted, without duplicates.
    pub fn union(&self) -> Arc<[IpNet]> {
        self.union.clone()
    }

    fn rebuild(&mut self) {
        let mut all: Vec<IpNet> = self.by_name.values().flatten().copied().collect();
        all.sort();
        all.dedup();
        self.union = all.into();
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::networking::v1::{ServiceCIDR, ServiceCIDRSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::ServiceCidrs;

    fn object(name: &str, cidrs: &[&str]) -> ServiceCIDR {
        ServiceCIDR {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..ObjectMeta::default()
            },
            spec: Some(ServiceCIDRSpec {
                cidrs: Some(cidrs.iter().map(|c| c.to_string()).collect()),
            }),
            status: None,
        }
    }

    fn union(c: &ServiceCidrs) -> Vec<String> {
        c.union().iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn a_range_named_by_two_objects_stays_until_both_are_gone() {
        let mut c = ServiceCidrs::default();
        let mut w = Vec::new();
        c.apply(
            &object("kubernetes", &["10.96.0.0/16", "fd00:10:96::/112"]),
            &mut w,
        );
        c.apply(&object("extra", &["10.96.0.0/16", "10.100.0.0/16"]), &mut w);
        assert_eq!(
            union(&c),
            ["10.96.0.0/16", "10.100.0.0/16", "fd00:10:96::/112"]
        );
        c.remove("kubernetes");
        assert_eq!(union(&c), ["10.96.0.0/16", "10.100.0.0/16"]);
        c.retain(|name| name != "extra");
        assert!(union(&c).is_empty());
        assert!(c.is_empty());
        assert!(w.is_empty());
    }

    #[test]
    fn a_bad_range_is_skipped_with_a_warning_naming_the_object_and_field() {
        let mut c = ServiceCidrs::default();
        let mut w = Vec::new();
        c.apply(
            &object("odd", &["10.96.0.1/16", "not-a-cidr\n", "10.97.0.0/16"]),
            &mut w,
        );
        // Host bits are cleared: the range is what the prefix covers.
        assert_eq!(union(&c), ["10.96.0.0/16", "10.97.0.0/16"]);
        assert_eq!(w.len(), 1);
        assert_eq!(w[0].object, "servicecidr odd");
        assert!(
            w[0].message.starts_with("spec.cidrs[1] \"not-a-cidr\\n\""),
            "{}",
            w[0].message
        );
    }

    #[test]
    fn an_object_without_spec_holds_no_range() {
        let mut c = ServiceCidrs::default();
        let mut w = Vec::new();
        let mut o = object("empty", &[]);
        o.spec = None;
        c.apply(&o, &mut w);
        assert!(union(&c).is_empty());
        assert!(!c.is_empty(), "the object is known, with no range");
    }
}
