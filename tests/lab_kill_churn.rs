//! The proxy killed (SIGKILL) at random points while other Services churn, in the namespace
//! lab, once per mode of ours that runs on this host (`lab/kill_churn/` says what is checked;
//! ipvs mode runs it in the User-mode Linux guest, `tests/lab_uml.rs`).
//!
//! `KILLS=20` gives the figure; `KILL_SEED=N` replays the random draws (the kill
//! points and the churn's writes). Needs root and `testenv/build`, as the lab does.

use support::lab;

use lab::Mode;
use lab::kill_churn::kills_under_churn;

#[tokio::test]
async fn ours_nftables_survives_kills_under_churn() {
    kills_under_churn(Mode::Nftables).await;
}

#[tokio::test]
async fn ours_iptables_survives_kills_under_churn() {
    kills_under_churn(Mode::Iptables).await;
}

#[tokio::test]
async fn ours_userspace_survives_kills_under_churn() {
    kills_under_churn(Mode::Userspace).await;
}

#[tokio::test]
async fn ours_ebpf_survives_kills_under_churn() {
    kills_under_churn(Mode::Ebpf).await;
}

/// Not a test: the entry point of the lab's echo servers and probes (see `lab/helper.rs`).
#[test]
fn lab_helper_process() {
    lab::helper::run_if_requested();
}
