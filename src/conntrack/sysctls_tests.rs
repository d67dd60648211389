//! The sysctl decision, and the writer against a fake `/proc/sys` and `/sys`.

#![allow(
    clippy::disallowed_methods,
    reason = "tests build a fake /proc/sys tree with std::fs::write"
)]

use std::collections::BTreeMap;
use std::time::Duration;

use super::*;

fn config() -> Conntrack {
    Conntrack {
        max_per_core: 32768,
        min: 131072,
        tcp_established_timeout: Duration::from_secs(86400),
        tcp_close_wait_timeout: Duration::from_secs(3600),
        tcp_be_liberal: false,
        udp_timeout: Duration::ZERO,
        udp_stream_timeout: Duration::ZERO,
    }
}

fn current(values: &[(Key, u64)]) -> impl Fn(Key) -> Option<u64> {
    let map: BTreeMap<Key, u64> = values.iter().copied().collect();
    move |k| map.get(&k).copied()
}

fn w(key: Key, value: u64) -> Write {
    Write { key, value }
}

#[test]
fn max_is_per_core_times_cpus_but_at_least_min_and_hashsize_only_grows() {
    // 8 CPUs: 262144 > min; hashsize 16384 < 65536 is raised.
    let got = plan(
        &config(),
        8,
        current(&[(Key::Max, 65536), (Key::HashSize, 16384)]),
    );
    assert_eq!(
        got,
        vec![
            w(Key::Max, 262144),
            w(Key::HashSize, 65536),
            w(Key::TcpEstablishedTimeout, 86400),
            w(Key::TcpCloseWaitTimeout, 3600),
        ]
    );
    // 2 CPUs: 65536 < min, so min; a larger hashsize is left alone.
    let got = plan(&config(), 2, current(&[(Key::HashSize, 1 << 20)]));
    assert_eq!(got[0], w(Key::Max, 131072));
    assert!(!got.iter().any(|w| w.key == Key::HashSize));
}

#[test]
fn a_larger_max_is_left_alone() {
    // 2 CPUs want 131072; a kernel that already allows 262144 keeps it (as upstream: raised
    // only), and so a proxy in a network namespace, where the value cannot be written, has
    // nothing to write.
    let got = plan(
        &config(),
        2,
        current(&[(Key::Max, 262144), (Key::HashSize, 65536)]),
    );
    assert!(!got.iter().any(|w| w.key == Key::Max), "{got:?}");
    let got = plan(&config(), 2, current(&[(Key::Max, 131071)]));
    assert_eq!(got[0], w(Key::Max, 131072));
}

#[test]
fn max_per_core_zero_leaves_max_and_hashsize_alone() {
    let cfg = Conntrack {
        max_per_core: 0,
        ..config()
    };
    let got = plan(&cfg, 64, current(&[(Key::HashSize, 1)]));
    assert!(
        got.iter()
            .all(|w| w.key != Key::Max && w.key != Key::HashSize)
    );
}

#[test]
fn values_already_in_place_are_not_written_again() {
    let now = current(&[
        (Key::Max, 262144),
        (Key::HashSize, 65536),
        (Key::TcpEstablishedTimeout, 86400),
        (Key::TcpCloseWaitTimeout, 3600),
    ]);
    assert_eq!(plan(&config(), 8, now), vec![]);
}

#[test]
fn zero_timeouts_and_false_be_liberal_leave_the_kernel_alone() {
    let cfg = Conntrack {
        max_per_core: 0,
        min: 0,
        tcp_established_timeout: Duration::ZERO,
        tcp_close_wait_timeout: Duration::ZERO,
        tcp_be_liberal: false,
        udp_timeout: Duration::ZERO,
        udp_stream_timeout: Duration::ZERO,
    };
    assert_eq!(plan(&cfg, 4, current(&[])), vec![]);
    let cfg = Conntrack {
        tcp_be_liberal: true,
        udp_timeout: Duration::from_secs(30),
        udp_stream_timeout: Duration::from_secs(120),
        ..cfg
    };
    assert_eq!(
        plan(&cfg, 4, current(&[])),
        vec![
            w(Key::UdpTimeout, 30),
            w(Key::UdpStreamTimeout, 120),
            w(Key::TcpBeLiberal, 1)
        ]
    );
}

#[test]
fn cpu_lists_count_ranges_and_singles() {
    assert_eq!(count_cpu_list("0-3\n"), Some(4));
    assert_eq!(count_cpu_list("0-3,8-11,15"), Some(9));
    assert_eq!(count_cpu_list("0"), Some(1));
    assert_eq!(count_cpu_list(""), None);
    assert_eq!(count_cpu_list("3-1"), None);
    assert_eq!(count_cpu_list("x"), None);
}

#[test]
fn apply_writes_the_fake_tree_and_collects_refusals() {
    let dir = tempfile::tempdir().unwrap();
    let host = Host {
        proc_sys: dir.path().join("proc/sys"),
        sys: dir.path().join("sys"),
    };
    let netfilter = host.proc_sys.join("net/netfilter");
    std::fs::create_dir_all(&netfilter).unwrap();
    std::fs::create_dir_all(host.sys.join("devices/system/cpu")).unwrap();
    std::fs::write(host.sys.join("devices/system/cpu/online"), "0-7\n").unwrap();
    std::fs::write(netfilter.join("nf_conntrack_max"), "65536\n").unwrap();
    std::fs::write(
        netfilter.join("nf_conntrack_tcp_timeout_established"),
        "432000\n",
    )
    .unwrap();
    std::fs::write(
        netfilter.join("nf_conntrack_tcp_timeout_close_wait"),
        "3600\n",
    )
    .unwrap();
    // No module directory: hashsize is unreadable, so it is not planned.
    assert_eq!(host.cpus(), 8);
    let applied = apply(&host, &config());
    assert_eq!(
        applied.written,
        vec![w(Key::Max, 262144), w(Key::TcpEstablishedTimeout, 86400)]
    );
    assert!(applied.refused.is_empty());
    assert_eq!(host.read(Key::Max), Some(262144));

    // A read-only value (here: a directory where the file should be) is refused, not fatal.
    let cfg = Conntrack {
        tcp_be_liberal: true,
        ..config()
    };
    std::fs::create_dir_all(netfilter.join("nf_conntrack_tcp_be_liberal")).unwrap();
    let applied = apply(&host, &cfg);
    assert_eq!(applied.written, vec![]);
    assert_eq!(applied.refused.len(), 1);
    assert_eq!(applied.refused[0].0, w(Key::TcpBeLiberal, 1));
}
