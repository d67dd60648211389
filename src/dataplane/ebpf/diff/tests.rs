use std::net::SocketAddr;

use super::*;
use crate::dataplane::ebpf::layout::{SCOPE_EXTERNAL, SCOPE_SOCKET};
use crate::dataplane::ebpf::plan::plan;

use crate::testing::snapshots::{node, snapshot, svc};

fn web(endpoints: &[&str]) -> Plan {
    let mut s = svc("default/web", "10.96.0.10", 80).external("192.0.2.10");
    for e in endpoints {
        let a: SocketAddr = e.parse().unwrap();
        s = s.ep(&a.ip().to_string(), a.port(), "node-b");
    }
    defined_ports(plan(&snapshot(node(), vec![s]), &Default::default()))
}

/// `plan` without the frontends of ClusterIPs' undefined ports (sets without slots, which the
/// tests of slot writes would only count).
fn defined_ports(mut plan: Plan) -> Plan {
    plan.frontends
        .retain(|f, _| f.port != crate::dataplane::ebpf::plan::UNDEFINED_PORT);
    plan.sets
        .retain(|s, _| s.list != crate::dataplane::ebpf::plan::List::Undefined);
    plan
}

/// Every frontend entry points at a complete slot set.
fn consistent(maps: &Maps) -> Result<(), String> {
    for (k, v) in &maps.svc {
        let got = slots_of(maps, *v);
        if got.len() != usize::from(v.count) {
            return Err(format!(
                "{}:{} sees {} of {} slots",
                k.ip(),
                k.port(),
                got.len(),
                v.count
            ));
        }
    }
    Ok(())
}

fn backends_seen(maps: &Maps) -> BTreeSet<Vec<SocketAddr>> {
    maps.svc
        .values()
        .map(|v| {
            slots_of(maps, *v)
                .iter()
                .map(Backend::socket_addr)
                .collect()
        })
        .collect()
}

#[test]
fn a_new_service_writes_slots_before_frontends() {
    let ops = diff(
        &Maps::default(),
        &web(&["10.244.1.5:8080", "10.244.2.5:8080"]),
    );
    let kinds: Vec<&str> = ops
        .iter()
        .map(|o| match o {
            Op::PutSlot(..) => "slot",
            Op::PutSvc(..) => "svc",
            _ => "del",
        })
        .collect();
    assert_eq!(
        kinds,
        ["slot", "slot", "slot", "slot", "svc", "svc", "svc", "svc"]
    );
    let maps = applied(Maps::default(), &ops);
    let socket: BTreeSet<u32> = maps
        .svc
        .iter()
        .filter(|(k, _)| k.scope == SCOPE_SOCKET)
        .map(|(_, v)| v.svc_id)
        .collect();
    assert_eq!(
        socket.len(),
        1,
        "ClusterIP and externalIP share one slot set"
    );
    let outside: Vec<&SvcVal> = maps
        .svc
        .iter()
        .filter(|(k, _)| k.scope == SCOPE_EXTERNAL)
        .map(|(_, v)| v)
        .collect();
    assert_eq!(
        outside.len(),
        2,
        "the ClusterIP and the externalIP from outside"
    );
    assert_eq!(outside[0].svc_id, outside[1].svc_id, "one slot set");
    assert!(!socket.contains(&outside[0].svc_id), "a set of its own");
    assert!(
        outside.iter().all(|v| v.flags == SVC_F_SNAT),
        "Cluster policy: source NAT"
    );
}

#[test]
fn an_unchanged_plan_writes_nothing_even_after_a_restart() {
    let want = web(&["10.244.1.5:8080"]);
    let maps = applied(Maps::default(), &diff(&Maps::default(), &want));
    assert_eq!(diff(&maps, &want), []);
}

#[test]
fn a_backend_change_never_shows_a_mix_of_old_and_new() {
    let old = ["10.244.1.5:8080", "10.244.2.5:8080", "10.244.3.5:8080"];
    let new = ["10.244.2.5:8080", "10.244.4.5:8080"];
    let mut maps = applied(Maps::default(), &diff(&Maps::default(), &web(&old)));
    let ops = diff(&maps, &web(&new));
    let old_set: Vec<SocketAddr> = old.iter().map(|s| s.parse().unwrap()).collect();
    let new_set: Vec<SocketAddr> = new.iter().map(|s| s.parse().unwrap()).collect();
    for op in &ops {
        maps = applied(maps, std::slice::from_ref(op));
        consistent(&maps).unwrap();
        for seen in backends_seen(&maps) {
            assert!(
                seen == old_set || seen == new_set,
                "mixed: {seen:?} after {op:?}"
            );
        }
    }
    assert_eq!(backends_seen(&maps), BTreeSet::from([new_set]));
    // The old generation is gone: only the new slots remain (of both sets).
    assert_eq!(maps.slots.len(), 4);
}

#[test]
fn a_removed_service_leaves_nothing_behind() {
    let maps = applied(
        Maps::default(),
        &diff(&Maps::default(), &web(&["10.244.1.5:8080"])),
    );
    let ops = diff(&maps, &Plan::default());
    assert_eq!(applied(maps, &ops), Maps::default());
}

#[test]
fn endpoints_going_to_zero_keep_the_frontend_with_no_slots() {
    let maps = applied(
        Maps::default(),
        &diff(&Maps::default(), &web(&["10.244.1.5:8080"])),
    );
    let maps = applied(maps.clone(), &diff(&maps, &web(&[])));
    assert_eq!(maps.svc.len(), 4);
    assert!(maps.svc.values().all(|v| v.count == 0));
    assert!(maps.slots.is_empty());
}

#[test]
fn new_sets_take_ids_no_entry_uses() {
    let first = applied(
        Maps::default(),
        &diff(&Maps::default(), &web(&["10.244.1.5:8080"])),
    );
    let both = defined_ports(plan(
        &snapshot(
            node(),
            vec![
                svc("default/web", "10.96.0.10", 80)
                    .external("192.0.2.10")
                    .ep("10.244.1.5", 8080, "node-b"),
                svc("default/api", "10.96.0.20", 443).ep("10.244.1.6", 8443, "node-b"),
            ],
        ),
        &Default::default(),
    ));
    let maps = applied(first.clone(), &diff(&first, &both));
    let ids: BTreeSet<u32> = maps.svc.values().map(|v| v.svc_id).collect();
    assert_eq!(
        ids.len(),
        4,
        "web's two sets (socket, external) and api's two"
    );
    let cip = svc_key(&Frontend {
        ip: "10.96.0.10".parse().unwrap(),
        port: 80,
        transport: Transport::Tcp,
        scope: Scope::Socket,
    });
    let web_id = first.svc[&cip].svc_id;
    assert_eq!(maps.svc[&cip].svc_id, web_id, "web keeps its id");
    consistent(&maps).unwrap();
}

#[test]
fn an_affinity_change_rewrites_the_frontend_not_the_slots() {
    let plain = web(&["10.244.1.5:8080"]);
    let maps = applied(Maps::default(), &diff(&Maps::default(), &plain));
    let mut sticky = plain.clone();
    let set = sticky.sets.keys().next().unwrap().clone();
    sticky.affinity.insert(set, 600);
    let ops = diff(&maps, &sticky);
    assert!(ops.iter().all(|o| matches!(o, Op::PutSvc(..))), "{ops:?}");
    let maps = applied(maps, &ops);
    let socket = maps.svc.iter().filter(|(k, _)| k.scope == SCOPE_SOCKET);
    assert!(socket.map(|(_, v)| v).all(|v| v.flags
        == crate::dataplane::ebpf::layout::SVC_F_AFFINITY
        && v.affinity_timeout == 600
        && v.generation == 0));
}

#[test]
fn source_ranges_restrict_a_frontend_only_once_its_ranges_are_in_and_leave_with_it() {
    let lb = |ranges: &[&str]| {
        let mut s =
            svc("default/lb", "10.96.0.10", 80)
                .lb("198.51.100.7")
                .ep("10.244.1.5", 8080, "node-a");
        for r in ranges {
            s = s.range(r);
        }
        plan(&snapshot(node(), vec![s]), &Default::default())
    };
    let ops = diff(&Maps::default(), &lb(&["203.0.113.0/24", "192.0.2.0/24"]));
    let src: Vec<u8> = ops
        .iter()
        .filter_map(|o| match o {
            Op::PutSrc(k) => Some(src_value(k)),
            _ => None,
        })
        .collect();
    assert_eq!(src, [1, 1, 0], "ranges first, then the marker");
    let first_svc = ops.iter().position(|o| matches!(o, Op::PutSvc(..)));
    assert!(ops.iter().rposition(|o| matches!(o, Op::PutSrc(_))) < first_svc);
    let maps = applied(Maps::default(), &ops);
    let ranges: BTreeSet<String> = maps
        .src
        .iter()
        .filter_map(|k| k.source())
        .map(|n| n.to_string())
        .collect();
    assert_eq!(
        ranges,
        BTreeSet::from(["192.0.2.0/24".to_string(), "203.0.113.0/24".to_string()])
    );
    assert!(
        maps.src
            .iter()
            .all(|k| k.frontend().ip().to_string() == "198.51.100.7")
    );

    // Ranges gone: the marker and the ranges go, after the frontends are written.
    let ops = diff(&maps, &lb(&[]));
    assert!(ops.iter().all(|o| !matches!(o, Op::PutSrc(_))));
    assert_eq!(applied(maps, &ops).src, BTreeSet::new());
}
