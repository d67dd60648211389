//! The kernel seam of the iptables mode: `iptables-restore --noflush` fed through a pipe,
//! `iptables-save`, and `iptables -S CHAIN` for the canaries, per family, in one flavour.
//! With the nft flavour it also tells the nf_tables [`monitor`] which transactions are ours
//! (the restore's pid) and pauses it around a large restore.
//!
//! The only code of the mode that starts a process. It never retries and never interprets what
//! it sends: the dataplane decides, this runs. `iptables-restore` commits each table in one
//! step and stops at the first table it cannot commit, so a refused input leaves the rules of
//! that table as they were.

use std::process::{Command, Stdio};
use std::sync::Arc;

pub mod flavour;

use super::ruleset::Table;
use crate::cluster::IpFamily;
use crate::dataplane::monitor::{self, Drift};
use crate::dataplane::tool::{self, Launcher};
use crate::nft::backend::netlink::Netlink;
use flavour::Flavour;

/// How long to wait for the xtables lock (`-w`), in seconds.
const LOCK_WAIT_SECONDS: &str = "5";

/// Restore inputs from this many lines on are sent with the nf_tables monitor paused: the
/// kernel notifies every rule of a transaction while anyone listens, and a cold sync of a
/// large cluster (a few hundred thousand rules) would overflow the monitor's socket, which
/// counts as an outside change and would start the next full sync, and so on.
pub const UNWATCHED_MIN_LINES: usize = 10_000;

/// Why the backend could not do what it was asked.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Spawn(#[from] tool::SpawnError),
    /// The tool ran and refused: `message` is its standard error, verbatim.
    #[error("{program} refused ({status}): {message}")]
    Refused {
        program: String,
        status: String,
        message: String,
    },
}

/// Sends restore inputs to the kernel and reads it back.
pub trait Backend: Send {
    /// `iptables-restore --noflush` with `input`.
    fn restore(&mut self, family: IpFamily, input: &str) -> Result<(), Error>;

    /// `iptables-save`: every table.
    fn save(&mut self, family: IpFamily) -> Result<String, Error>;

    /// `iptables -t TABLE -S CHAIN`: one chain's rules, as `-A CHAIN ...` lines.
    fn list_chain(&mut self, family: IpFamily, table: Table, chain: &str) -> Result<String, Error>;

    /// Whether `chain` exists in `table`.
    fn has_chain(&mut self, family: IpFamily, table: Table, chain: &str) -> Result<bool, Error>;

    /// The nf_tables monitor watching our rules (nft flavour): the backend records the pid of
    /// every restore it runs, so the monitor tells our transactions from other programs', and
    /// may pause it around a large one.
    fn watched_by(&mut self, drift: Arc<Drift>);
}

/// The real backend: one flavour's tools, optionally through a prefix such as
/// `ip netns exec NAME` (tests program a network namespace).
#[derive(Clone, Debug)]
pub struct IptablesCommand {
    flavour: Flavour,
    launcher: Launcher,
    /// Where the tools run, for reading the nf_tables generation around a paused restore.
    place: Place,
    /// The monitor watching our rules, once [`Backend::watched_by`] was called.
    drift: Option<Arc<Drift>>,
}

/// The network namespace the tools run in, as far as this backend knows it.
#[derive(Clone, Debug)]
enum Place {
    Here,
    Netns(String),
    /// Behind a caller's prefix: not known, so no restore is sent unwatched.
    Unknown,
}

impl IptablesCommand {
    /// The tools of `flavour` from `PATH`, in the caller's network namespace.
    pub fn new(flavour: Flavour) -> IptablesCommand {
        IptablesCommand {
            flavour,
            launcher: Launcher::here(),
            place: Place::Here,
            drift: None,
        }
    }

    /// The tools of `flavour` inside the named network namespace.
    pub fn in_netns(flavour: Flavour, name: &str) -> IptablesCommand {
        IptablesCommand {
            flavour,
            launcher: Launcher::in_netns(name),
            place: Place::Netns(name.to_owned()),
            drift: None,
        }
    }

    /// The tools of `flavour` run through `prefix` (for example `ip netns exec NAME env
    /// PATH=...`).
    pub fn with_prefix(flavour: Flavour, prefix: Vec<String>) -> IptablesCommand {
        IptablesCommand {
            flavour,
            launcher: Launcher::with_prefix(prefix),
            place: Place::Unknown,
            drift: None,
        }
    }

    pub fn flavour(&self) -> Flavour {
        self.flavour
    }

    /// Chooses the flavour where the node's rules live (see [`flavour`]), reading both with
    /// their `-save` tools through `prefix` (empty: here). A flavour whose tools fail counts as
    /// holding nothing; one refused for want of privilege (iptables-legacy's tools without
    /// CAP_NET_RAW) is also one warning per tool, since its rules may well be there.
    pub fn detect(prefix: &[String]) -> Flavour {
        let (flavour, _, refused) = IptablesCommand::read_both(prefix);
        for (tool, error) in refused {
            tracing::warn!(%tool, %error,
                "cannot read this flavour's rules (iptables-legacy's tools need CAP_NET_RAW); \
                 choosing the flavour as if it had none");
        }
        flavour
    }

    /// [`IptablesCommand::detect`], with the chosen flavour's `-save` output of each family
    /// (indexed by [`IpFamily::index`]; `None`: its tool failed), for a caller that reads the
    /// rules next (`explain`) and need not run the tool again. Warns of nothing: the running
    /// proxy did at start.
    pub fn detect_saved(prefix: &[String]) -> (Flavour, [Option<String>; 2]) {
        let (flavour, saved, _) = IptablesCommand::read_both(prefix);
        (flavour, saved)
    }

    /// The flavour chosen, its `-save` outputs, and the tools refused for want of privilege
    /// with their error.
    fn read_both(prefix: &[String]) -> (Flavour, [Option<String>; 2], Vec<(String, String)>) {
        let launcher = Launcher::with_prefix(prefix.to_vec());
        let mut refused = Vec::new();
        let mut read = |f: Flavour| -> [Option<String>; 2] {
            IpFamily::ALL.map(|family| {
                let tool = f.tool(family, "-save");
                let out = launcher
                    .command(&tool)
                    .stdin(Stdio::null())
                    .stderr(Stdio::piped())
                    .output()
                    .ok()?;
                if out.status.success() {
                    return Some(String::from_utf8_lossy(&out.stdout).into_owned());
                }
                let error = String::from_utf8_lossy(&out.stderr);
                if error.contains("Permission denied") {
                    refused.push((tool, error.trim().to_owned()));
                }
                None
            })
        };
        let nft = read(Flavour::Nft);
        let legacy = read(Flavour::Legacy);
        let joined =
            |saved: &[Option<String>; 2]| saved.iter().flatten().cloned().collect::<String>();
        match flavour::choose(&joined(&nft), &joined(&legacy)) {
            Flavour::Nft => (Flavour::Nft, nft, refused),
            Flavour::Legacy => (Flavour::Legacy, legacy, refused),
        }
    }

    /// Whether [`IptablesCommand::detect`] would choose nft, told without saving nft's
    /// tables where that is certain ([`flavour::nft_for_sure`]): `Some(true)` then; `None`
    /// when only `detect` can tell. For `explain`, which reads nft's chains one by one.
    pub fn nft_for_sure(prefix: &[String]) -> Option<bool> {
        let launcher = Launcher::with_prefix(prefix.to_vec());
        let save = |f: Flavour| -> String {
            IpFamily::ALL
                .map(|family| {
                    launcher
                        .command(&f.tool(family, "-save"))
                        .stdin(Stdio::null())
                        .stderr(Stdio::null())
                        .output()
                        .ok()
                        .filter(|o| o.status.success())
                        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                        .unwrap_or_default()
                })
                .concat()
        };
        // The kubelet keeps its markers in mangle; `-S` of one chain reads that chain only.
        let nft_marker = IpFamily::ALL.iter().any(|&family| {
            flavour::MARKERS.iter().any(|marker| {
                launcher
                    .command(&Flavour::Nft.tool(family, ""))
                    .args(["-w", LOCK_WAIT_SECONDS, "-t", "mangle", "-S", marker])
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success())
            })
        });
        let legacy = save(Flavour::Legacy);
        flavour::nft_for_sure(nft_marker, &legacy).then_some(true)
    }

    /// `-S CHAIN` of one chain: its policy or declaration line, then its rules as `-A` lines;
    /// `None` when the table has no such chain (iptables' exit status 1).
    pub fn list_chain_if_present(
        &self,
        family: IpFamily,
        table: Table,
        chain: &str,
    ) -> Result<Option<String>, Error> {
        let (mut cmd, program) = self.command(family, "");
        cmd.args(["-w", LOCK_WAIT_SECONDS, "-t", table.as_str(), "-S", chain]);
        let out = tool::output(&mut cmd, &program)?;
        if out.status.success() {
            Ok(Some(String::from_utf8_lossy(&out.stdout).into_owned()))
        } else if out.status.code() == Some(1) {
            Ok(None)
        } else {
            Err(refused(program, &out))
        }
    }

    fn command(&self, family: IpFamily, suffix: &str) -> (Command, String) {
        let program = self.flavour.tool(family, suffix);
        (self.launcher.command(&program), program)
    }

    /// Runs `iptables-restore` with `input`, recording its pid for the monitor before anything
    /// is written (no table can commit earlier).
    fn run_restore(&self, family: IpFamily, input: &str) -> Result<(), Error> {
        let (mut cmd, program) = self.command(family, "-restore");
        cmd.args(["-w", LOCK_WAIT_SECONDS, "--noflush"]);
        let own = self.drift.as_ref().map(|d| d.own_processes());
        let output = tool::feed(&mut cmd, &program, input, |pid| {
            if let Some(own) = &own {
                own.record(pid);
            }
        })?;
        if output.status.success() {
            Ok(())
        } else {
            Err(refused(program, &output))
        }
    }

    /// The nf_tables generation where the tools run, when it can be read.
    fn generation(&self) -> Option<u32> {
        let mut netlink = match &self.place {
            Place::Here => Netlink::new(),
            Place::Netns(name) => Netlink::in_netns(name),
            Place::Unknown => return None,
        };
        netlink.generation().ok().flatten()
    }
}

/// Why an IP family cannot be programmed with iptables on this host.
#[derive(Debug, thiserror::Error)]
pub enum Unusable {
    /// The family's nat table has no built-in POSTROUTING chain.
    #[error("the nat table has no POSTROUTING chain")]
    NoNatPostrouting,
    /// Its tool could not be started (not installed, say), named with the system's reason.
    #[error("{}: {}", .0, .0.source)]
    Spawn(#[source] tool::SpawnError),
    /// Its tool ran and refused.
    #[error(transparent)]
    Refused(Error),
}

/// Whether `family` can be programmed: its tool runs and its nat table has the built-in
/// POSTROUTING chain (upstream's "present" check). The error says why not.
pub fn check_family(backend: &mut impl Backend, family: IpFamily) -> Result<(), Unusable> {
    match backend.has_chain(family, Table::Nat, "POSTROUTING") {
        Ok(true) => Ok(()),
        Ok(false) => Err(Unusable::NoNatPostrouting),
        Err(Error::Spawn(e)) => Err(Unusable::Spawn(e)),
        Err(e) => Err(Unusable::Refused(e)),
    }
}

fn refused(program: String, out: &std::process::Output) -> Error {
    Error::Refused {
        program,
        status: out.status.to_string(),
        message: String::from_utf8_lossy(&out.stderr).trim_end().to_string(),
    }
}

impl Backend for IptablesCommand {
    fn restore(&mut self, family: IpFamily, input: &str) -> Result<(), Error> {
        match &self.drift {
            Some(drift) if input.lines().count() >= UNWATCHED_MIN_LINES => {
                // iptables-nft-restore commits each table's section as one transaction.
                let tables = input.lines().filter(|l| *l == "COMMIT").count();
                let commits = u32::try_from(tables).unwrap_or(u32::MAX);
                monitor::apply_unwatched(
                    drift,
                    || self.generation(),
                    commits,
                    || self.run_restore(family, input),
                )
            }
            _ => self.run_restore(family, input),
        }
    }

    fn save(&mut self, family: IpFamily) -> Result<String, Error> {
        let (mut cmd, program) = self.command(family, "-save");
        let out = tool::output(&mut cmd, &program)?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(refused(program, &out))
        }
    }

    fn list_chain(&mut self, family: IpFamily, table: Table, chain: &str) -> Result<String, Error> {
        let (mut cmd, program) = self.command(family, "");
        cmd.args(["-w", LOCK_WAIT_SECONDS, "-t", table.as_str(), "-S", chain]);
        let out = tool::output(&mut cmd, &program)?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(refused(program, &out))
        }
    }

    fn has_chain(&mut self, family: IpFamily, table: Table, chain: &str) -> Result<bool, Error> {
        let (mut cmd, program) = self.command(family, "");
        cmd.args(["-w", LOCK_WAIT_SECONDS, "-t", table.as_str(), "-S", chain]);
        let out = tool::output(&mut cmd, &program)?;
        if out.status.success() {
            return Ok(true);
        }
        // Exit status 1 is iptables' "no such chain"; anything else (lock, permission) is an
        // error the caller should see.
        if out.status.code() == Some(1) {
            return Ok(false);
        }
        Err(refused(program, &out))
    }

    fn watched_by(&mut self, drift: Arc<Drift>) {
        self.drift = Some(drift);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataplane::iptables::{IptablesDataplane, ModeConfig};

    /// Tools behind a prefix that does not exist: nothing can be started.
    fn no_tools() -> IptablesCommand {
        IptablesCommand::with_prefix(Flavour::Nft, vec!["/nonexistent/kube-proxy-rs".into()])
    }

    #[test]
    fn a_family_whose_tool_cannot_start_is_unusable_with_the_system_reason() {
        let unusable = check_family(&mut no_tools(), IpFamily::V4).expect_err("nothing runs");
        let Unusable::Spawn(spawn) = &unusable else {
            panic!("{unusable:?}");
        };
        assert_eq!(spawn.source.kind(), std::io::ErrorKind::NotFound);
        assert_eq!(unusable.to_string(), format!("{spawn}: {}", spawn.source));
        assert!(std::error::Error::source(&unusable).is_some());
    }

    #[test]
    fn no_usable_family_names_each_family_and_keeps_its_reason() {
        let mut dataplane = IptablesDataplane::new(ModeConfig::default(), no_tools());
        let error = dataplane
            .keep_usable_families()
            .expect_err("nothing is usable");
        let families: Vec<IpFamily> = error.reasons.iter().map(|(f, _)| *f).collect();
        assert_eq!(families, [IpFamily::V4, IpFamily::V6]);
        assert!(
            error
                .reasons
                .iter()
                .all(|(_, reason)| matches!(reason, Unusable::Spawn(_)))
        );
        let message = error.to_string();
        assert!(
            message.starts_with("iptables is not usable on this host: IPv4: ")
                && message.contains("; IPv6: "),
            "{message}"
        );
    }
}
