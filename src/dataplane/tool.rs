//! Rule tools (`nft`, `iptables-restore`, `iptables-save`, ...) run as child processes: the one
//! place the text backends of every mode and `--cleanup` start them.
//!
//! Thin I/O, no decisions: a [`Launcher`] says how a tool is started (directly, or through a
//! prefix such as `ip netns exec NAME` when tests program a network namespace),
//! [`run_with_input`] feeds a script to one without deadlocking, [`run_if_installed`] runs a
//! one-shot command that may be missing, and [`excerpt`] quotes the
//! lines of a script a tool complained about, for errors.

use std::io::Write as _;
use std::process::{Command, Output, Stdio};

/// How tools are started: directly from `PATH`, or through a prefix.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Launcher {
    prefix: Vec<String>,
}

impl Launcher {
    /// Tools from `PATH`, in the caller's network namespace.
    pub fn here() -> Launcher {
        Launcher::default()
    }

    /// Tools inside the named network namespace: `ip netns exec NAME`, which execs the tool in
    /// place, so a child's pid is the tool's pid.
    pub fn in_netns(name: &str) -> Launcher {
        Launcher::with_prefix(vec![
            "ip".into(),
            "netns".into(),
            "exec".into(),
            name.into(),
        ])
    }

    /// Tools run through `prefix` (for example `ip netns exec NAME env PATH=...`).
    pub fn with_prefix(prefix: Vec<String>) -> Launcher {
        Launcher { prefix }
    }

    /// A command for `program`, through the prefix.
    pub fn command(&self, program: &str) -> Command {
        #[allow(clippy::disallowed_methods)] // the process seam: this is where tools start
        match self.prefix.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(program);
                c
            }
            None => Command::new(program),
        }
    }

    /// The network namespace the tools run in, when the prefix is `ip netns exec NAME`: for
    /// the netlink parts of a cleanup, which start no tool.
    pub fn netns(&self) -> Option<&str> {
        match self.prefix.as_slice() {
            [ip, netns, exec, name] if ip == "ip" && netns == "netns" && exec == "exec" => {
                Some(name)
            }
            _ => None,
        }
    }

    /// How `program` is run, as the words of its command line, for messages.
    pub fn describe(&self, program: &str) -> String {
        let mut words = self.prefix.clone();
        words.push(program.into());
        words.join(" ")
    }
}

/// A tool could not be started, or talked to.
#[derive(Debug, thiserror::Error)]
#[error("cannot run {program}")]
pub struct SpawnError {
    /// The tool as the message names it.
    pub program: String,
    #[source]
    pub source: std::io::Error,
}

/// Runs `cmd` (named `program` in errors) to its end with nothing on its standard input.
pub fn output(cmd: &mut Command, program: &str) -> Result<Output, SpawnError> {
    cmd.stdin(Stdio::null())
        .output()
        .map_err(|source| SpawnError {
            program: program.to_owned(),
            source,
        })
}

/// [`run_with_input`], with a failure to run named after `program`.
pub fn feed(
    cmd: &mut Command,
    program: &str,
    input: &str,
    started: impl FnOnce(u32),
) -> Result<Output, SpawnError> {
    run_with_input(cmd, input, started).map_err(|source| SpawnError {
        program: program.to_owned(),
        source,
    })
}

/// Runs `cmd` with `input` on its standard input and collects both outputs. The input is
/// written on its own thread, so a script larger than the pipe cannot deadlock against the
/// tool's output; a write error means the tool exited early, and its status and standard error
/// say why. `started` receives the child's pid before anything is written (the nftables monitor
/// attributes the transaction to it, and it cannot commit before its input is complete).
pub fn run_with_input(
    cmd: &mut Command,
    input: &str,
    started: impl FnOnce(u32),
) -> std::io::Result<Output> {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    started(child.id());
    let mut stdin = child.stdin.take().expect("stdin is piped");
    std::thread::scope(|s| {
        let writer = s.spawn(move || {
            let _ = stdin.write_all(input.as_bytes());
        });
        let output = child.wait_with_output();
        let _ = writer.join();
        output
    })
}

/// Why a tool run by [`run_if_installed`] gave no output.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// It could not be started or waited for (other than not being installed).
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// It ran and exited unsuccessfully: its standard error and exit status, on one line.
    #[error("{stderr} ({status})")]
    Failed {
        stderr: String,
        status: std::process::ExitStatus,
    },
}

/// Runs a tool to its end, feeding `input` when given: its standard output on success,
/// `Ok(None)` when the tool is not installed, else why not (its standard error and exit status
/// when it ran). For the one-shot commands (`--cleanup`), which report rather than fail.
pub fn run_if_installed(
    cmd: &mut Command,
    input: Option<&str>,
) -> Result<Option<String>, RunError> {
    let out = match input {
        Some(text) => run_with_input(cmd, text, |_| {}),
        None => cmd.stdin(Stdio::null()).output(),
    };
    let out = match out {
        Ok(out) => out,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(RunError::Io(e)),
    };
    let stderr = String::from_utf8_lossy(&out.stderr);
    // `ip netns exec` reports a missing program itself, with exit status 255.
    if !out.status.success() && stderr.contains("No such file or directory") && input.is_none() {
        return Ok(None);
    }
    if out.status.success() {
        Ok(Some(String::from_utf8_lossy(&out.stdout).into_owned()))
    } else {
        Err(RunError::Failed {
            stderr: stderr.trim_end().to_owned(),
            status: out.status,
        })
    }
}

/// Lines `n - around ..= n + around` of `script`, numbered, `>` marking line `n` (1-based);
/// lines longer than `width` characters are cut and end in ` ...`.
pub fn excerpt(script: &str, n: usize, around: usize, width: usize) -> String {
    let first = n.saturating_sub(around).max(1);
    script
        .lines()
        .enumerate()
        .skip(first - 1)
        .take(n + around + 1 - first)
        .map(|(i, text)| {
            let mark = if i + 1 == n { '>' } else { ' ' };
            let cut: String = text.chars().take(width).collect();
            let more = if cut.len() < text.len() { " ..." } else { "" };
            format!("{mark}{:>6} | {cut}{more}", i + 1)
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_excerpt_numbers_the_lines_around_the_one_named() {
        let script = "a\nb\nc\nd\ne\nf\n";
        assert_eq!(
            excerpt(script, 4, 2, 240),
            "      2 | b\n      3 | c\n>     4 | d\n      5 | e\n      6 | f"
        );
        assert_eq!(excerpt(script, 1, 1, 240), ">     1 | a\n      2 | b");
        let long = "x".repeat(1000);
        let cut = excerpt(&long, 1, 2, 240);
        assert!(cut.ends_with("x ...") && cut.len() < 300, "{cut}");
    }

    #[test]
    fn a_large_input_reaches_the_tool_whole() {
        let input = "line of input\n".repeat(100_000);
        let mut pid = 0;
        let out = run_with_input(&mut Launcher::here().command("wc"), &input, |p| pid = p)
            .expect("wc runs");
        assert!(out.status.success() && pid > 0);
        let words: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .map(str::to_owned)
            .collect();
        assert_eq!(words[0], "100000");
    }

    #[test]
    fn a_tool_that_fails_says_why_and_a_missing_one_is_none() {
        let here = Launcher::here();
        let failed = run_if_installed(
            here.command("sh").args(["-c", "echo refused >&2; exit 3"]),
            None,
        )
        .expect_err("exit 3 fails");
        let RunError::Failed { stderr, status } = &failed else {
            panic!("{failed:?}");
        };
        assert_eq!((stderr.as_str(), status.code()), ("refused", Some(3)));
        assert_eq!(failed.to_string(), "refused (exit status: 3)");
        let missing = run_if_installed(&mut here.command("kube-proxy-rs-no-such-tool"), None);
        assert!(matches!(missing, Ok(None)), "{missing:?}");
        let fed = run_if_installed(&mut here.command("cat"), Some("text\n")).expect("cat runs");
        assert_eq!(fed.as_deref(), Some("text\n"));
    }

    #[test]
    fn a_prefix_goes_before_the_program() {
        let l = Launcher::in_netns("ns1");
        assert_eq!(l.describe("nft"), "ip netns exec ns1 nft");
        assert_eq!(Launcher::here().describe("nft"), "nft");
        let c = l.command("nft");
        assert_eq!(c.get_program(), "ip");
        let args: Vec<_> = c.get_args().collect();
        assert_eq!(args, ["netns", "exec", "ns1", "nft"]);
    }
}
