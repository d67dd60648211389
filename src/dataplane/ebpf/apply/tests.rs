use super::*;
use crate::dataplane::ebpf::backend::Error;
use crate::dataplane::ebpf::diff::{Maps, Op};
use crate::testing::snapshots::{node, snapshot, svc};

/// Maps in memory that refuse the write numbered `fail_at` once.
#[derive(Default)]
struct Fake {
    maps: Maps,
    reads: usize,
    writes: usize,
    fail_at: Option<usize>,
}

impl Backend for Fake {
    fn read(&mut self) -> Result<Maps, Error> {
        self.reads += 1;
        Ok(self.maps.clone())
    }
    fn write(&mut self, op: &Op) -> Result<(), Error> {
        self.writes += 1;
        if self.fail_at == Some(self.writes) {
            self.fail_at = None;
            return Err(Error::Missing("refused on purpose"));
        }
        self.maps = diff::applied(std::mem::take(&mut self.maps), std::slice::from_ref(op));
        Ok(())
    }
}

fn web(endpoints: &[&str]) -> Snapshot {
    let mut s = svc("default/web", "10.96.0.10", 80);
    for (i, e) in endpoints.iter().enumerate() {
        s = s.ep(e, 8080, if i % 2 == 0 { "node-a" } else { "node-b" });
    }
    snapshot(node(), vec![s])
}

/// The service ports that differ between two snapshots, as the tracker reports them.
fn changes(old: &Snapshot, new: &Snapshot) -> Changes {
    let mut c = Changes::default();
    for name in old.ports.keys().chain(new.ports.keys()) {
        if old.ports.get(name) != new.ports.get(name) {
            c.ports.insert(name.clone());
        }
    }
    c
}

/// Each frontend with its backends as a socket program would see them; and whether any
/// slot is left that no frontend reaches.
fn resolved(maps: &Maps) -> (Vec<(SvcKey, Vec<std::net::SocketAddr>)>, usize) {
    let mut reached = 0;
    let mut ids = std::collections::BTreeSet::new();
    let mut out = Vec::new();
    for (k, v) in &maps.svc {
        let backends: Vec<_> = (0..v.count)
            .map(|slot| {
                let key = crate::dataplane::ebpf::layout::SlotKey {
                    svc_id: v.svc_id,
                    slot,
                    generation: v.generation,
                    pad: 0,
                };
                maps.slots[&key].socket_addr()
            })
            .collect();
        if ids.insert((v.svc_id, v.generation)) {
            reached += backends.len();
        }
        out.push((*k, backends));
    }
    (out, maps.slots.len() - reached)
}

/// A small deterministic generator (xorshift), so the sequence is the same on every run.
struct Rng(u64);
impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// Service `i` in `variant` (0: absent): few variants, so a Service often stays as it was
/// while others change, and externalIPs are often contested.
fn service(i: u64, variant: u64) -> Option<crate::testing::snapshots::Svc> {
    if variant == 0 {
        return None;
    }
    let mut rng = Rng(0x2545_f491_4f6c_dd1d ^ (i << 8) ^ variant);
    let mut s = svc(&format!("default/s{i}"), &format!("10.96.0.{}", 10 + i), 80);
    if rng.below(2) == 0 {
        s = s.external(&format!("192.0.2.{}", rng.below(2)));
    }
    if rng.below(4) == 0 {
        s = s.internal_local();
    }
    if rng.below(3) == 0 {
        s = s.lb(&format!("198.51.100.{}", rng.below(2)));
        if rng.below(2) == 0 {
            s = s.range(&format!("203.0.113.{}/32", rng.below(3)));
        }
    }
    if rng.below(3) == 0 {
        s = s.external_local();
    }
    if rng.below(3) == 0 {
        s = s.node_port(30000 + u16::try_from(i).unwrap());
    }
    for e in 0..rng.below(4) {
        let node = if rng.below(2) == 0 {
            "node-a"
        } else {
            "node-b"
        };
        s = s.ep(&format!("10.244.{i}.{}", e + rng.below(3)), 8080, node);
    }
    Some(s)
}

fn random_cluster(rng: &mut Rng, variants: &mut [u64; 6]) -> Snapshot {
    for v in variants.iter_mut() {
        if rng.below(3) == 0 {
            *v = rng.below(6);
        }
    }
    let services = (0..6)
        .filter_map(|i| service(i, variants[i as usize]))
        .collect();
    snapshot(node(), services)
}

#[test]
fn incremental_syncs_leave_the_maps_a_full_sync_would() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut incremental = EbpfDataplane::new(Fake::default(), NodePortAddresses::default());
    let mut full = EbpfDataplane::new(Fake::default(), NodePortAddresses::default());
    let mut last = snapshot(node(), vec![]);
    let mut variants = [0; 6];
    for step in 0..500 {
        let next = random_cluster(&mut rng, &mut variants);
        incremental
            .sync(&next, &changes(&last, &next), false)
            .unwrap();
        full.sync(&next, &Changes::default(), true).unwrap();
        let (a, stale_a) = resolved(&incremental.backend.maps);
        let (b, _) = resolved(&full.backend.maps);
        assert_eq!(a, b, "step {step}");
        assert_eq!(stale_a, 0, "step {step}: slots no frontend reaches");
        assert_eq!(
            incremental.backend.maps.node_ports, full.backend.maps.node_ports,
            "step {step}"
        );
        assert_eq!(
            incremental.backend.maps.src, full.backend.maps.src,
            "step {step}: source ranges"
        );
        assert_eq!(
            incremental.held.as_ref().unwrap().maps,
            incremental.backend.maps
        );
        last = next;
    }
}

#[test]
fn an_idle_sync_reads_nothing_and_writes_nothing() {
    let mut dp = EbpfDataplane::new(Fake::default(), NodePortAddresses::default());
    let snap = web(&["10.244.1.5"]);
    dp.sync(&snap, &Changes::default(), false).unwrap();
    let (reads, writes) = (dp.backend.reads, dp.backend.writes);
    let report = dp.sync(&snap, &Changes::default(), false).unwrap();
    assert_eq!((dp.backend.reads, dp.backend.writes), (reads, writes));
    assert_eq!(report.families[0].operations, 0);
    // The ClusterIP from this node and from outside (a slot each), and its undefined ports
    // (TCP and UDP, both scopes).
    assert_eq!(report.families[0].objects, 8);
}

#[test]
fn a_failed_write_is_finished_by_the_next_sync_after_a_fresh_read() {
    let mut dp = EbpfDataplane::new(
        Fake {
            fail_at: Some(2),
            ..Fake::default()
        },
        NodePortAddresses::default(),
    );
    let snap = web(&["10.244.1.5", "10.244.2.5"]);
    assert!(dp.sync(&snap, &Changes::default(), false).is_err());
    let report = dp.sync(&snap, &Changes::default(), false).unwrap();
    assert!(report.full, "re-read after the failure");
    let maps = &dp.backend.maps;
    assert_eq!(maps.svc.len(), 6);
    let balanced: Vec<u16> = maps
        .svc
        .values()
        .map(|v| v.count)
        .filter(|&c| c > 0)
        .collect();
    assert_eq!(balanced, [2, 2], "from this node and from outside");
    assert_eq!(
        maps.slots.len(),
        4,
        "the half-written set left no slot behind"
    );
    assert_eq!(diff::diff(maps, &plan::plan(&snap, &dp.node_ports)), []);
}
