//! The kernel seam of the nftables mode: sends a script to `nft -f -` and reads our table back
//! with `nft -j list table`.
//!
//! The only code of the mode that starts a process. [`Backend`] has one real implementation,
//! [`NftCommand`]; tests add one that fails on demand. It never retries and never interprets
//! what it sends: the applier decides, this runs. A script is one `nft -f` invocation, which
//! nft applies as one atomic transaction, so a refused script changes nothing.

use std::io::Write as _;
use std::process::{Command, Stdio};

use super::monitor::OwnProcesses;
use super::names;
use super::ruleset::Family;

/// Why the backend could not do what it was asked.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The program could not be started or talked to.
    #[error("cannot run {program}")]
    Spawn {
        program: String,
        #[source]
        source: std::io::Error,
    },
    /// nft ran and refused: `message` is its standard error, verbatim.
    #[error("nft refused ({status}): {message}")]
    Refused { status: String, message: String },
    /// The dump was not UTF-8.
    #[error("nft printed something that is not UTF-8")]
    NotText,
}

/// Sends scripts to the kernel and reads our table back.
pub trait Backend: Send {
    /// Applies `script` as one transaction: all of it, or nothing and an error.
    fn run(&mut self, script: &str) -> Result<(), Error>;

    /// `nft -j list table <family> kube-proxy-rs`, or `None` when the table does not exist.
    fn dump(&mut self, family: Family) -> Result<Option<String>, Error>;
}

/// The real backend: the `nft` program, optionally run through a prefix such as
/// `ip netns exec NAME` (tests program a network namespace; setns would need `unsafe`).
#[derive(Clone, Debug)]
pub struct NftCommand {
    /// Program and leading arguments before `nft`'s own; empty runs `nft` directly.
    prefix: Vec<String>,
    /// Where the pids of our `nft -f` processes are recorded, so the monitor can tell our
    /// transactions from other programs'.
    own: Option<OwnProcesses>,
}

impl Default for NftCommand {
    fn default() -> NftCommand {
        NftCommand::new()
    }
}

impl NftCommand {
    /// `nft` from `PATH`, in the caller's network namespace.
    pub fn new() -> NftCommand {
        NftCommand {
            prefix: Vec::new(),
            own: None,
        }
    }

    /// `nft` inside the named network namespace (`ip netns exec NAME nft ...`).
    pub fn in_netns(name: &str) -> NftCommand {
        NftCommand {
            prefix: vec!["ip".into(), "netns".into(), "exec".into(), name.into()],
            own: None,
        }
    }

    /// Records the pid of every `nft -f` this backend starts in `own`.
    pub fn with_own_processes(mut self, own: OwnProcesses) -> NftCommand {
        self.own = Some(own);
        self
    }

    /// A command for `nft` with `args`, through the prefix. `ip netns exec` execs nft in place,
    /// so the child's pid is nft's pid.
    pub fn command<I, S>(&self, args: I) -> Command
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        let mut cmd = self.tool("nft");
        cmd.args(args);
        cmd
    }

    /// Another netfilter tool (`iptables-save`, ...) through the same prefix, for `--cleanup`.
    pub fn tool(&self, program: &str) -> Command {
        #[allow(clippy::disallowed_methods)] // the mode's process seam: this is where tools start
        match self.prefix.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(program);
                c
            }
            None => Command::new(program),
        }
    }

    fn program(&self) -> String {
        let mut words = self.prefix.clone();
        words.push("nft".into());
        words.join(" ")
    }
}

impl Backend for NftCommand {
    fn run(&mut self, script: &str) -> Result<(), Error> {
        let spawn_error = |source| Error::Spawn {
            program: self.program(),
            source,
        };
        let mut child = self
            .command(["-f", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(spawn_error)?;
        if let Some(own) = &self.own {
            // Before the script is written: the transaction cannot commit earlier.
            own.record(child.id());
        }
        let mut stdin = child.stdin.take().expect("stdin is piped");
        // Written on its own thread so a large script cannot deadlock against nft's output.
        let output = std::thread::scope(|s| {
            let writer = s.spawn(move || {
                // A write error means nft exited early; its status and stderr tell why.
                let _ = stdin.write_all(script.as_bytes());
            });
            let output = child.wait_with_output();
            let _ = writer.join();
            output
        })
        .map_err(spawn_error)?;
        if output.status.success() {
            Ok(())
        } else {
            Err(Error::Refused {
                status: output.status.to_string(),
                message: String::from_utf8_lossy(&output.stderr)
                    .trim_end()
                    .to_string(),
            })
        }
    }

    fn dump(&mut self, family: Family) -> Result<Option<String>, Error> {
        let output = self
            .command(["-j", "list", "table", family_word(family), names::TABLE])
            .stdin(Stdio::null())
            .output()
            .map_err(|source| Error::Spawn {
                program: self.program(),
                source,
            })?;
        if output.status.success() {
            return String::from_utf8(output.stdout)
                .map(Some)
                .map_err(|_| Error::NotText);
        }
        let message = String::from_utf8_lossy(&output.stderr)
            .trim_end()
            .to_string();
        // The kernel's ENOENT, as nft 1.0.6 prints it: the table is simply not there.
        if message.contains("No such file or directory") {
            return Ok(None);
        }
        Err(Error::Refused {
            status: output.status.to_string(),
            message,
        })
    }
}

/// The family as nft spells it.
pub fn family_word(family: Family) -> &'static str {
    match family {
        Family::Ip => "ip",
        Family::Ip6 => "ip6",
    }
}
