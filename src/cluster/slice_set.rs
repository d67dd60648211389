//! The EndpointSlices of one Service, by name, in name order.
//!
//! Why not a `BTreeMap`: almost every Service has one slice (a slice holds up to 100
//! endpoints), and a `BTreeMap` of one entry allocates a whole node for eleven (hundreds of
//! bytes per Service); a sorted vector of one entry is one small allocation.

use std::sync::Arc;

use super::endpoints::ParsedSlice;

/// A Service's slices by name, in name order (the order the merge of their endpoints reads
/// them in, so the result does not depend on arrival order).
#[derive(Debug, Default)]
pub(super) struct SliceSet(Vec<(Arc<str>, Arc<ParsedSlice>)>);

impl SliceSet {
    pub fn get(&self, name: &str) -> Option<&Arc<ParsedSlice>> {
        self.find(name).ok().map(|i| &self.0[i].1)
    }

    pub fn insert(&mut self, name: Arc<str>, slice: Arc<ParsedSlice>) {
        match self.find(&name) {
            Ok(i) => self.0[i].1 = slice,
            Err(i) => self.0.insert(i, (name, slice)),
        }
    }

    pub fn remove(&mut self, name: &str) {
        if let Ok(i) = self.find(name) {
            self.0.remove(i);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The slices in name order.
    pub fn values(&self) -> impl Iterator<Item = &ParsedSlice> {
        self.0.iter().map(|(_, s)| s.as_ref())
    }

    fn find(&self, name: &str) -> Result<usize, usize> {
        self.0.binary_search_by(|(n, _)| (**n).cmp(name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::model::{IpFamily, ServiceKey};

    fn slice(name: &str) -> Arc<ParsedSlice> {
        Arc::new(ParsedSlice {
            service: ServiceKey {
                namespace: Arc::from("ns"),
                name: Arc::from("web"),
            },
            name: Arc::from(name),
            family: IpFamily::V4,
            ports: Vec::new(),
            endpoints: Vec::new(),
            trigger_time: None,
        })
    }

    #[test]
    fn slices_are_kept_by_name_in_name_order_whatever_the_order_they_came_in() {
        let mut set = SliceSet::default();
        for name in ["web-c", "web-a", "web-b"] {
            set.insert(Arc::from(name), slice(name));
        }
        set.insert(Arc::from("web-a"), slice("web-a"));
        let names = |set: &SliceSet| set.values().map(|s| s.name.to_string()).collect::<Vec<_>>();
        assert_eq!(names(&set), ["web-a", "web-b", "web-c"]);
        assert!(set.get("web-b").is_some() && set.get("web-d").is_none());
        set.remove("web-b");
        set.remove("web-d");
        assert_eq!(names(&set), ["web-a", "web-c"]);
        set.remove("web-a");
        set.remove("web-c");
        assert!(set.is_empty());
    }
}
