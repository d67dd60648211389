//! The end-to-end scenario suite in the namespace lab, once per proxy and mode:
//! upstream kube-proxy as the reference (which also validates the lab), and ours. Upstream's
//! runs check the scenarios' expectations, not our code, so they are `#[ignore]`d in the default
//! `cargo test` and run by `.ci/upstream-runs`.
//!
//! Each test builds its own lab (3 nodes, 6 pods, an external client), runs every scenario in
//! turn, prints a table of verdicts, and fails on any unexpected result. Needs root, `ip`, `nft`,
//! `iptables` and `testenv/build`; without root it fails with that reason (never skips).
//! `LAB_SCENARIOS=1,4` runs a subset while developing.

use support::lab;

use lab::{Mode, Proxy};

#[tokio::test]
#[ignore = "documents upstream's behaviour (it checks the scenarios' expectations, not our code); \
            run with .ci/upstream-runs"]
async fn upstream_nftables_passes_the_lab_scenarios() {
    lab::scenarios::run_suite(Proxy::Upstream {
        mode: Mode::Nftables,
    })
    .await;
}

#[tokio::test]
#[ignore = "documents upstream's behaviour (it checks the scenarios' expectations, not our code); \
            run with .ci/upstream-runs"]
async fn upstream_iptables_passes_the_lab_scenarios() {
    lab::scenarios::run_suite(Proxy::Upstream {
        mode: Mode::Iptables,
    })
    .await;
}

#[tokio::test]
async fn ours_nftables_lab_scenarios() {
    lab::scenarios::run_suite(Proxy::Ours {
        mode: Mode::Nftables,
    })
    .await;
}

#[tokio::test]
async fn ours_iptables_lab_scenarios() {
    lab::scenarios::run_suite(Proxy::Ours {
        mode: Mode::Iptables,
    })
    .await;
}

#[tokio::test]
async fn ours_userspace_lab_scenarios() {
    lab::scenarios::run_suite(Proxy::Ours {
        mode: Mode::Userspace,
    })
    .await;
}

#[tokio::test]
async fn ours_ebpf_lab_scenarios() {
    lab::scenarios::run_suite(Proxy::Ours { mode: Mode::Ebpf }).await;
}

/// Not a test: the entry point of the lab's pod echo servers and traffic probes, which re-run
/// this binary inside a namespace (see `lab/helper.rs`). Without their environment variable it
/// returns at once.
#[test]
fn lab_helper_process() {
    lab::helper::run_if_requested();
}
