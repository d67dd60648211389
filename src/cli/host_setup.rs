//! The proxy's start-up settings of the host and of its own process that every mode shares: the
//! conntrack sysctls and the OOM score adjustment (a mode's own are its
//! [`crate::dataplane::mode::Mode::set_up_host`]).
//!
//! Each is best effort, as upstream's are: a value the kernel refuses (read-only `/proc/sys` in a
//! network namespace, no permission) is one warning naming the value and the error, and
//! start-up goes on.

use crate::config::Config;
use crate::conntrack;

/// Where a process sets its own OOM score adjustment.
const OOM_SCORE_ADJ: &str = "/proc/self/oom_score_adj";

/// Sets the conntrack sysctls from the configuration.
pub fn conntrack_sysctls(config: &Config) {
    let applied = conntrack::sysctls::apply(&conntrack::sysctls::Host::real(), &config.conntrack);
    for w in &applied.written {
        tracing::info!(
            sysctl = w.key.path(),
            value = w.value,
            "set conntrack sysctl"
        );
    }
    for (w, error) in &applied.refused {
        tracing::warn!(
            sysctl = w.key.path(),
            value = w.value,
            %error,
            "cannot set conntrack sysctl; going on with the kernel's value"
        );
    }
}

/// Sets this process's OOM score adjustment (`oomScoreAdj` / `--oom-score-adj`, -999 by
/// default), as upstream's proxy does when it starts serving, so the kernel's OOM killer spares
/// the proxy before the node's workloads. Lowering it needs `CAP_SYS_RESOURCE`.
pub fn oom_score_adj(config: &Config) {
    let value = config.oom_score_adj;
    #[allow(
        clippy::disallowed_methods,
        reason = "start-up process setup, beside the sysctls"
    )]
    match std::fs::write(OOM_SCORE_ADJ, value.to_string()) {
        Ok(()) => tracing::info!(value, "set oom_score_adj"),
        Err(error) => tracing::warn!(
            value,
            %error,
            "cannot set oom_score_adj; going on with the one this process has"
        ),
    }
}
