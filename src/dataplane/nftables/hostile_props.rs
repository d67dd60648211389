//! Hostile input: names and values an attacker controls go through planner and renderer; no
//! name can add a statement (the rendered text has the same lines, word for word outside
//! comments, as the same snapshot with benign names), and the script stays valid for
//! `nft --check`. That last property is a kernel test (root): `kernel_`-named and ignored by
//! a plain `cargo test --lib`; `cargo test --lib -- --ignored kernel_` runs it.

use proptest::prelude::*;

use super::golden_tests::nft_check;
use super::mode_config::ModeConfig;
use super::plan_all;
use crate::nft::render_from_scratch;
use crate::testing::hostile::{self, services};
use crate::testing::snapshots::{node, snapshot};

/// Replaces the 16-hex-digit hashes after `affinity-` and `-` in derived names with `H`.
fn unhash(line: &str) -> String {
    let mut out = String::new();
    let mut rest = line;
    while let Some(at) = rest.find("affinity-") {
        out.push_str(&rest[..at + 9]);
        rest = &rest[at + 9..];
        loop {
            let hex = rest.bytes().take_while(u8::is_ascii_hexdigit).count();
            if hex != 16 {
                break;
            }
            out.push('H');
            rest = &rest[16..];
            match rest.strip_prefix('-') {
                Some(r) if r.bytes().take_while(u8::is_ascii_hexdigit).count() == 16 => {
                    out.push('-');
                    rest = r;
                }
                _ => break,
            }
        }
    }
    out.push_str(rest);
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn hostile_names_cannot_add_statements_or_break_the_script(
        names in prop::collection::vec(hostile::NFT.names(), 1..5)
    ) {
        let benign: Vec<String> = (0..names.len()).map(|i| format!("svc{i}")).collect();
        let cfg = ModeConfig::default();
        // Service ports are ordered by name, so compare per service: one at a time.
        for (bad, good) in names.iter().zip(&benign) {
            let bad_script = render_from_scratch(&plan_all(&snapshot(node(), services(std::slice::from_ref(bad))), &cfg));
            let good_script = render_from_scratch(&plan_all(&snapshot(node(), services(std::slice::from_ref(good))), &cfg));
            prop_assert_eq!(bad_script.lines().count(), good_script.lines().count());
            prop_assert!(hostile::NFT.shape(&bad_script, unhash) == hostile::NFT.shape(&good_script, unhash), "statements differ for {:?}", bad);
        }
    }

    #[test]
    #[ignore = "kernel: runs nft --check (root); cargo test --lib -- --ignored kernel_"]
    fn kernel_hostile_scripts_pass_nft_check(
        names in prop::collection::vec(hostile::NFT.names(), 1..5)
    ) {
        let all = render_from_scratch(&plan_all(&snapshot(node(), services(&names)), &ModeConfig::default()));
        if let Err(e) = nft_check(&all) {
            panic!("nft --check refused a hostile script:\n{e}\n{all}");
        }
    }
}
