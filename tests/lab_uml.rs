//! The lab scenario suite (`lab/scenarios`) inside a User-mode Linux guest (`support/uml.rs`,
//! kernel 6.1): what this host's kernel cannot run (IPVS), and a second kernel version for the
//! modes that also run on the host.
//!
//! - ours in ipvs mode, and upstream kube-proxy in ipvs mode, each in a guest of its own;
//!   upstream's run only documents upstream's behaviour (its verdicts do not gate), so it is
//!   `#[ignore]`d: `cargo test --test lab_uml -- --ignored ipvs_upstream` runs it (docs/testing.md);
//! - ours in nftables and iptables mode on 6.1, beside the host-kernel runs in
//!   `lab_scenarios.rs`;
//! - ours in ipvs mode SIGKILLed under churn (`lab/kill_churn/`), `#[ignore]`d for its
//!   minutes: `cargo test --test lab_uml -- --ignored ours_ipvs_survives_kills`.
//!
//! Each test boots one guest (3 GiB, one CPU) and re-runs this binary in it
//! (`lab_uml_helper_process`), which starts the real API server from `testenv/` inside the
//! guest (state on the guest's tmpfs, `TESTENV_STATE=/run/te`), builds the whole lab there and
//! runs the suite, with the same expectations as on the host. The guest's output, with the
//! verdict table, is printed; the test fails unless the suite passed. The guest is killed only
//! once it has printed no line for [`SILENCE_LIMIT`] (the suite prints one per scenario), so a
//! busy machine makes a suite slower, never cut short. Everything the lab
//! creates lives and dies with the guest; its scratch files are on the guest's tmpfs.
//! `LAB_SCENARIOS=1,4`, `KILLS` and `KILL_SEED` are passed on into the guest.

#![allow(
    clippy::disallowed_methods,
    reason = "a kernel test: boots a UML guest and reads the developer's scenario filter"
)]

use support::uml;

use support::lab;

use std::path::Path;
use std::time::Duration;

use lab::{Mode, Proxy};
use uml::host::helper_process::{HelperProcess, RESULT, results};

static HELPER: HelperProcess = HelperProcess::new("lab_uml_helper_process");

/// A guest that runs etcd, the API server, the controllers, three proxies and the lab's pods.
const GUEST_MEMORY_MIB: u64 = 3072;
/// How long a check waits for a change in the guest: one CPU runs the API server, three
/// proxies and the probes, and a proxy that execs tools for each sync (upstream's ipvs mode
/// runs `ipset` and `iptables-restore`) syncs several times slower there than on the host.
const GUEST_SETTLE_SECS: u64 = 60;
/// The guest is killed once it has printed no line for this long. The suite prints a line per
/// scenario, and cuts a scenario off at its own limit (three times the host's with
/// `LAB_SETTLE_SECS` set, as here: `lab::scenarios`), which this is well above; so only a
/// guest that hangs stays silent this long, and the suite's length follows its work.
const SILENCE_LIMIT: Duration = Duration::from_secs(10 * 60);

#[test]
fn ours_ipvs_lab_scenarios_in_uml() {
    suite_in_guest(Proxy::Ours { mode: Mode::Ipvs });
}

#[test]
#[ignore = "documents upstream's ipvs mode only (its verdicts do not gate) and takes long; \
            run with: cargo test --test lab_uml -- --ignored ipvs_upstream"]
fn ipvs_upstream_lab_scenarios_in_uml() {
    suite_in_guest(Proxy::Upstream { mode: Mode::Ipvs });
}

#[test]
fn kernel_6_1_ours_nftables_lab_scenarios_in_uml() {
    suite_in_guest(Proxy::Ours {
        mode: Mode::Nftables,
    });
}

#[test]
fn kernel_6_1_ours_iptables_lab_scenarios_in_uml() {
    suite_in_guest(Proxy::Ours {
        mode: Mode::Iptables,
    });
}

/// Our ipvs mode SIGKILLed at random points under churn (`lab/kill_churn/`), as the host's
/// modes are in `lab_kill_churn.rs`. `KILLS` and `KILL_SEED` are passed on into the guest.
#[test]
#[ignore = "a guest of its own for some minutes; run with: cargo test --test lab_uml -- --ignored \
            ours_ipvs_survives_kills"]
fn ours_ipvs_survives_kills_under_churn_in_uml() {
    in_guest(KILL_CHURN_ROLE, "kill test", "kills ok");
}

/// The helper's role that runs the kill test in ipvs mode.
const KILL_CHURN_ROLE: &str = "kill-churn-ours-ipvs";

/// Boots a guest that runs the suite for `proxy`, prints what it printed, and fails unless
/// the suite passed in it.
fn suite_in_guest(proxy: Proxy) {
    in_guest(&role_of(proxy), "lab suite", "suite ok");
}

/// Boots a guest that runs the helper's `role`, prints what it printed, and fails unless it
/// reported `passed`.
fn in_guest(role: &str, what: &str, passed: &str) {
    let Some(uml) = uml::Uml::find() else {
        return;
    };
    // The developer's filters, digits and commas only, passed on into the guest.
    let filter: String = ["LAB_SCENARIOS", "KILLS", "KILL_SEED"]
        .into_iter()
        .filter_map(|var| {
            let digits: String = std::env::var(var)
                .ok()?
                .chars()
                .filter(|c| c.is_ascii_digit() || *c == ',')
                .collect();
            Some(format!("{var}={digits} "))
        })
        .collect();
    let command = format!(
        "{filter}{}={GUEST_SETTLE_SECS} TESTENV_STATE=/run/te {}=/run/scratch {}",
        lab::scenarios::SETTLE_VAR,
        uml::host::SCRATCH_VAR,
        HELPER.shell_line(role)
    );
    let run = uml.with_memory(GUEST_MEMORY_MIB).run(
        &[],
        Path::new(env!("CARGO_MANIFEST_DIR")),
        &command,
        uml::Limit::Silent(SILENCE_LIMIT),
    );
    println!("--- the {role} guest ({:?}):\n{}", run.took, run.output);
    let ok = results(&run.output).contains(&passed);
    assert!(
        run.exit_code == Some(0) && ok,
        "the {what} ({role}) failed in the UML guest (exit {:?}, after {:?}); its output is above",
        run.exit_code,
        run.took
    );
}

/// The helper's work for `proxy`: `suite-ours-ipvs`, `suite-upstream-nftables`, …
fn role_of(proxy: Proxy) -> String {
    let who = match proxy {
        Proxy::Ours { .. } => "ours",
        Proxy::Upstream { .. } => "upstream",
    };
    format!("suite-{who}-{}", proxy.mode().as_str())
}

fn proxy_of(role: &str) -> Proxy {
    [Mode::Ipvs, Mode::Nftables, Mode::Iptables]
        .into_iter()
        .flat_map(|mode| [Proxy::Ours { mode }, Proxy::Upstream { mode }])
        .find(|p| role_of(*p) == role)
        .unwrap_or_else(|| panic!("unknown lab_uml helper role {role}"))
}

/// Not a test: inside the guest, runs the suite the role names (see the module doc).
#[test]
fn lab_uml_helper_process() {
    HELPER.when_requested(|role| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime");
        if role == KILL_CHURN_ROLE {
            runtime.block_on(lab::kill_churn::kills_under_churn(Mode::Ipvs));
            println!("{RESULT}kills ok");
        } else {
            runtime.block_on(lab::scenarios::run_suite(proxy_of(role)));
            println!("{RESULT}suite ok");
        }
    });
}

/// Not a test: the entry point of the lab's pod echo servers and traffic probes in the guest
/// (see `lab/helper.rs`). Without their environment variable it returns at once.
#[test]
fn lab_helper_process() {
    lab::helper::run_if_requested();
}
