//! The scenario files (`tests/scenarios/*.txt`): cases kept as data, each a cluster and the
//! questions an operator asks of it, which every mode answers through `kube-proxy-rs explain`
//! over the rules it plans from the manifests. Nothing needs root: `explain --manifests` plans
//! offline and walks the packet through the planned rules.
//!
//! A file has a comment saying what it is about, then three sections, each opened by a line
//! `-- NAME --`:
//!
//! - `flags`: the command line every question is asked with (`--hostname-override`, and any
//!   other flag of `explain`), one or more per line;
//! - `manifests`: the YAML documents `--manifests` reads (Nodes, Services, EndpointSlices);
//! - `expect`: one line per question, `TO [from FROM] [in IFACE] => OUTCOME`, with `TO`, `FROM`
//!   and `IFACE` as `explain` takes them and `OUTCOME` what upstream kube-proxy does:
//!   `forwarded ENDPOINT… masquerade|direct`, `rejected`, `dropped` or `untouched`.
//!
//! A line prefixed with modes (`ipvs,ebpf: TO … => OUTCOME # why`) is those modes' answer in
//! place of the line for the same question without a prefix, which every question has. Such a
//! line must say why after `#`: a mode answers differently from upstream only where
//! docs/operations.md names the difference.
//!
//! Every mode of the registry (`modes::ALL`) runs every file, or those `SCENARIO_MODES` names
//! (`nftables,ipvs`); the test lists every question whose answer differs, and fails if there
//! is one.

#![allow(
    clippy::disallowed_methods,
    reason = "runs the built binary and writes the manifests it reads"
)]

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

use kube_proxy_rs::config::ProxyMode;
use kube_proxy_rs::dataplane::modes;
use serde_json::Value;
use support::layout;

/// One question, as a file asks it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Question {
    to: String,
    from: Option<String>,
    in_interface: Option<String>,
}

impl std::fmt::Display for Question {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.to)?;
        if let Some(from) = &self.from {
            write!(f, " from {from}")?;
        }
        if let Some(iface) = &self.in_interface {
            write!(f, " in {iface}")?;
        }
        Ok(())
    }
}

/// What a file expects of one question: upstream's answer, and where a mode answers otherwise.
#[derive(Debug, Default)]
struct Expected {
    line: usize,
    upstream: Option<String>,
    by_mode: BTreeMap<&'static str, String>,
}

/// A scenario file, parsed.
#[derive(Debug)]
struct Scenario {
    path: PathBuf,
    flags: Vec<String>,
    manifests: String,
    expect: BTreeMap<Question, Expected>,
}

/// Reads `path`; a malformed file fails the test naming its line.
fn parse(path: &Path) -> Scenario {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut sections: BTreeMap<&str, Vec<(usize, &str)>> = BTreeMap::new();
    let mut current: Option<&str> = None;
    for (i, line) in text.lines().enumerate() {
        let number = i + 1;
        if let Some(name) = line
            .strip_prefix("-- ")
            .and_then(|rest| rest.strip_suffix(" --"))
        {
            assert!(
                ["flags", "manifests", "expect"].contains(&name),
                "{}:{number}: unknown section {name:?} (flags, manifests, expect)",
                path.display()
            );
            assert!(
                sections.insert(name, Vec::new()).is_none(),
                "{}:{number}: a second {name} section",
                path.display()
            );
            current = Some(name);
            continue;
        }
        match current {
            Some(name) => sections.get_mut(name).unwrap().push((number, line)),
            None => assert!(
                line.is_empty() || line.starts_with('#'),
                "{}:{number}: text before the first section must be a comment",
                path.display()
            ),
        }
    }
    let mut section = |name: &str| {
        sections
            .remove(name)
            .unwrap_or_else(|| panic!("{}: no {name} section", path.display()))
    };
    let flags = section("flags")
        .into_iter()
        .filter(|(_, l)| !l.trim().is_empty() && !l.starts_with('#'))
        .flat_map(|(_, l)| l.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
        .collect();
    let manifests = section("manifests")
        .into_iter()
        .map(|(_, l)| format!("{l}\n"))
        .collect();
    let mut expect: BTreeMap<Question, Expected> = BTreeMap::new();
    for (number, line) in section("expect") {
        let (body, why) = match line.split_once('#') {
            Some((body, why)) => (body.trim(), why.trim()),
            None => (line.trim(), ""),
        };
        if body.is_empty() {
            continue;
        }
        let at = format!("{}:{number}", path.display());
        let (modes, body) = match body.split_once(':') {
            Some((names, rest)) if names.chars().all(|c| c.is_ascii_lowercase() || c == ',') => {
                let modes: Vec<ProxyMode> = names
                    .split(',')
                    .map(|n| {
                        modes::ALL
                            .into_iter()
                            .find(|m| m.as_str() == n)
                            .unwrap_or_else(|| panic!("{at}: {n:?} is not a mode"))
                    })
                    .collect();
                assert!(
                    !why.is_empty(),
                    "{at}: a mode's own answer says why after #"
                );
                (Some(modes), rest.trim())
            }
            _ => (None, body),
        };
        let (question, outcome) = body
            .split_once("=>")
            .unwrap_or_else(|| panic!("{at}: expected TO [from FROM] [in IFACE] => OUTCOME"));
        let question = question_of(question, &at);
        let outcome = canonical(outcome, &at);
        let expected = expect.entry(question.clone()).or_default();
        match modes {
            None => {
                assert!(
                    expected.upstream.is_none(),
                    "{at}: {question} is asked twice"
                );
                expected.upstream = Some(outcome);
                expected.line = number;
            }
            Some(modes) => {
                for mode in modes {
                    assert!(
                        expected
                            .by_mode
                            .insert(mode.as_str(), outcome.clone())
                            .is_none(),
                        "{at}: {mode}'s answer to {question} is given twice"
                    );
                }
            }
        }
    }
    for (question, expected) in &expect {
        assert!(
            expected.upstream.is_some(),
            "{}: {question} has modes' answers but no line for upstream's",
            path.display()
        );
    }
    assert!(!expect.is_empty(), "{}: no questions", path.display());
    Scenario {
        path: path.to_path_buf(),
        flags,
        manifests,
        expect,
    }
}

fn question_of(text: &str, at: &str) -> Question {
    let mut words = text.split_whitespace();
    let to = words
        .next()
        .unwrap_or_else(|| panic!("{at}: no destination"))
        .to_owned();
    let mut question = Question {
        to,
        from: None,
        in_interface: None,
    };
    while let Some(word) = words.next() {
        let value = words
            .next()
            .unwrap_or_else(|| panic!("{at}: {word} needs a value"))
            .to_owned();
        match word {
            "from" => question.from = Some(value),
            "in" => question.in_interface = Some(value),
            other => panic!("{at}: {other:?}: expected from or in"),
        }
    }
    question
}

/// An outcome as a file writes it, in the one spelling the test compares: the verdict, then
/// for a forwarded packet its endpoints in order and whether it is masqueraded.
fn canonical(text: &str, at: &str) -> String {
    let mut words = text.split_whitespace();
    let verdict = words.next().unwrap_or_else(|| panic!("{at}: no outcome"));
    let rest: Vec<&str> = words.collect();
    match verdict {
        "rejected" | "dropped" | "untouched" => {
            assert!(rest.is_empty(), "{at}: {verdict} takes nothing after it");
            verdict.to_owned()
        }
        "forwarded" | "mixed" => {
            let (masquerade, endpoints) = rest
                .split_last()
                .unwrap_or_else(|| panic!("{at}: {verdict} needs endpoints and masquerade|direct"));
            assert!(
                ["masquerade", "direct", "either"].contains(masquerade),
                "{at}: {verdict}'s last word is masquerade, direct or either"
            );
            let endpoints = endpoints
                .iter()
                .map(|e| {
                    e.parse()
                        .unwrap_or_else(|_| panic!("{at}: {e:?} is not ADDRESS:PORT"))
                })
                .collect();
            spelled(verdict, endpoints, masquerade)
        }
        other => {
            panic!("{at}: {other:?}: expected forwarded, mixed, rejected, dropped or untouched")
        }
    }
}

/// A forwarded (or mixed) outcome in the one spelling: the verdict, the endpoints in address
/// order, then `masquerade`, `direct` or `either`.
fn spelled(verdict: &str, mut endpoints: Vec<SocketAddr>, masquerade: &str) -> String {
    endpoints.sort();
    let mut out = verdict.to_owned();
    for e in endpoints {
        write!(out, " {e}").unwrap();
    }
    write!(out, " {masquerade}").unwrap();
    out
}

/// The outcome of `explain --output json`, in the spelling of [`canonical`].
fn answered(json: &Value) -> String {
    let outcome = &json["outcome"];
    let verdict = outcome["verdict"].as_str().expect("a verdict");
    match verdict {
        "forwarded" | "mixed" => {
            let endpoints = outcome["endpoints"]
                .as_array()
                .expect("endpoints")
                .iter()
                .map(|e| e["endpoint"].as_str().unwrap().parse().unwrap())
                .collect();
            let masquerade = match outcome["masquerade"].as_bool() {
                Some(true) => "masquerade",
                Some(false) => "direct",
                None => "either",
            };
            spelled(verdict, endpoints, masquerade)
        }
        other => other.to_owned(),
    }
}

/// `mode`'s answer to `question` over the manifests in `dir`.
fn ask(dir: &Path, flags: &[String], mode: ProxyMode, question: &Question) -> String {
    let mut cmd = Command::new(layout::kube_proxy_rs_binary());
    cmd.arg("explain")
        .arg("--manifests")
        .arg(dir)
        .args(flags)
        .args(["--proxy-mode", mode.as_str(), "--output", "json", "--to"])
        .arg(&question.to);
    if let Some(from) = &question.from {
        cmd.args(["--from", from]);
    }
    if let Some(iface) = &question.in_interface {
        cmd.args(["--in-interface", iface]);
    }
    let out = cmd.output().expect("run kube-proxy-rs explain");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{mode}: explain {question}: {}\n{stderr}",
        out.status
    );
    let json: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{mode}: explain {question}: not JSON ({e})"));
    answered(&json)
}

/// Every mode's wrong answers to `scenario`, one line each.
fn wrong_answers(scenario: &Scenario) -> Vec<String> {
    let dir = tempfile::tempdir().expect("a scratch directory");
    std::fs::write(dir.path().join("cluster.yaml"), &scenario.manifests).expect("write manifests");
    let mut wrong = Vec::new();
    for mode in asked_modes() {
        for (question, expected) in &scenario.expect {
            let want = expected
                .by_mode
                .get(mode.as_str())
                .or(expected.upstream.as_ref())
                .expect("every question has upstream's answer");
            let got = ask(dir.path(), &scenario.flags, mode, question);
            if &got != want {
                wrong.push(format!(
                    "{}:{} {mode}: {question}\n    expected {want}\n    answered {got}",
                    scenario.path.display(),
                    expected.line
                ));
            }
        }
    }
    wrong
}

/// The modes `SCENARIO_MODES` names, else every mode of the registry.
fn asked_modes() -> Vec<ProxyMode> {
    let Ok(names) = std::env::var("SCENARIO_MODES") else {
        return modes::ALL.to_vec();
    };
    names
        .split(',')
        .map(|n| {
            modes::ALL
                .into_iter()
                .find(|m| m.as_str() == n.trim())
                .unwrap_or_else(|| panic!("SCENARIO_MODES: {n:?} is not a mode"))
        })
        .collect()
}

fn scenario_files() -> Vec<PathBuf> {
    let dir = layout::repo_root().join("tests/scenarios");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "txt"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no scenario files in {}", dir.display());
    files
}

#[test]
fn every_mode_answers_every_scenario_as_its_file_expects() {
    let scenarios: Vec<Scenario> = scenario_files().iter().map(|p| parse(p)).collect();
    let wrong: Vec<String> = std::thread::scope(|s| {
        let running: Vec<_> = scenarios
            .iter()
            .map(|scenario| s.spawn(move || wrong_answers(scenario)))
            .collect();
        running
            .into_iter()
            .flat_map(|t| t.join().expect("a scenario's thread"))
            .collect()
    });
    assert!(
        wrong.is_empty(),
        "{} wrong answers:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

#[test]
fn a_file_that_says_nothing_of_upstream_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.txt");
    std::fs::write(
        &path,
        "# only a mode's answer\n-- flags --\n-- manifests --\n-- expect --\nipvs: 10.96.0.1:80 => dropped # why\n",
    )
    .unwrap();
    let refused = std::panic::catch_unwind(|| parse(&path)).expect_err("refused");
    let message = refused
        .downcast_ref::<String>()
        .cloned()
        .unwrap_or_default();
    assert!(message.contains("no line for upstream's"), "{message}");
}

#[test]
fn outcomes_are_compared_in_one_spelling() {
    assert_eq!(
        canonical(
            "forwarded 10.244.2.10:8080 10.244.1.10:8080 masquerade",
            "x"
        ),
        "forwarded 10.244.1.10:8080 10.244.2.10:8080 masquerade"
    );
    let json = serde_json::json!({"outcome": {
        "verdict": "forwarded",
        "endpoints": [{"endpoint": "10.244.2.10:8080", "share": 0.5},
                      {"endpoint": "10.244.1.10:8080", "share": 0.5}],
        "masquerade": false
    }});
    assert_eq!(
        answered(&json),
        "forwarded 10.244.1.10:8080 10.244.2.10:8080 direct"
    );
}
