//! One libFuzzer binary for every target of `kube_proxy_rs::fuzzing`: the target is named by
//! `KPRS_FUZZ_TARGET` (`fuzz/run` sets it), so the instrumented crate is linked once, not once
//! per target.

#![no_main]

use std::sync::OnceLock;

#[allow(
    clippy::disallowed_methods,
    reason = "libFuzzer owns the arguments; the target is named in the environment"
)]
fn chosen() -> fn(&[u8]) {
    static CHOSEN: OnceLock<fn(&[u8])> = OnceLock::new();
    *CHOSEN.get_or_init(|| {
        let name = std::env::var("KPRS_FUZZ_TARGET").unwrap_or_default();
        kube_proxy_rs::fuzzing::target(&name).unwrap_or_else(|| {
            let names: Vec<_> = kube_proxy_rs::fuzzing::TARGETS
                .iter()
                .map(|t| t.0)
                .collect();
            panic!("KPRS_FUZZ_TARGET={name:?} is not a target; targets: {names:?}")
        })
    })
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| chosen()(data));
