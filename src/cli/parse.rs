//! From the process's arguments to a [`Cli`], as upstream's command line reads them and as an
//! operator needs to hear about them.
//!
//! - pflag's spelling: `_` in a flag's name means `-` (`--proxy_mode`), and a flag given twice
//!   keeps its last value (lists add up).
//! - `--help` reads the one list of settings not acted on
//!   ([`crate::config::not_acted_on`]), so each such flag says so where it is described.
//! - An error is one line: the flag and what it takes, or the nearest known flag for a
//!   misspelled one.
//! - The one-shot flags (`--cleanup`, `--init-only`, `--write-config-to`) belong to the proxy
//!   itself: a subcommand refuses them rather than ignoring them or letting them replace its
//!   output, and its `--help` does not list them.
//!
//! Pure: takes the arguments, returns the parsed command line or what to print.

use std::ffi::OsString;

use clap::error::{ContextKind, ErrorKind};
use clap::{CommandFactory as _, FromArgMatches as _};

use super::{Cli, Command};
use crate::config::{Flags, not_acted_on};

/// The one-shot flags a subcommand refuses, by argument id and flag name.
const PROXY_ONLY: [(&str, &str); 3] = [
    ("cleanup", "cleanup"),
    ("init_only", "init-only"),
    ("write_config_to", "write-config-to"),
];

/// Why parsing stopped.
#[derive(Debug)]
pub enum Stop {
    /// `--help` or `help`: clap's text, to print (in colour at a terminal) with success.
    Help(clap::Error),
    /// A bad command line, for exit code 1; its `Display` is one line without the `error: `
    /// prefix.
    Invalid(Invalid),
}

/// What is wrong with a command line.
#[derive(Debug, thiserror::Error)]
pub enum Invalid {
    /// clap refused it: shown as the flag and what it takes, or the nearest known flag.
    #[error("{}", one_line(.0))]
    Flag(clap::Error),
    /// A subcommand's flags were given before its name.
    #[error("give flags after `{subcommand}`, not before it")]
    FlagsBeforeSubcommand { subcommand: &'static str },
    /// A subcommand was given a one-shot flag of the proxy itself.
    #[error(
        "`{subcommand}` does not take --{flag}; it belongs to the proxy itself (no subcommand)"
    )]
    ProxyOnly {
        subcommand: &'static str,
        flag: &'static str,
    },
}

/// The command line's definition as `--help` shows it: each flag on the not-acted-on list
/// says so, and subcommands do not list the one-shot flags.
pub fn command() -> clap::Command {
    fn annotate(cmd: clap::Command) -> clap::Command {
        cmd.args_override_self(true)
            .mut_args(|arg| {
                let Some(note) = arg.get_long().and_then(not_acted_on::flag_note) else {
                    return arg;
                };
                let help = arg.get_help().map(ToString::to_string).unwrap_or_default();
                arg.help(format!("{help} [{note}]"))
            })
            .mut_subcommands(|sub| {
                PROXY_ONLY.iter().fold(annotate(sub), |sub, (id, _)| {
                    sub.mut_arg(id, |a| a.hide(true))
                })
            })
    }
    annotate(Cli::command())
}

/// Parses `argv` (the program name first).
pub fn parse<I, T>(argv: I) -> Result<Cli, Stop>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString>,
{
    let matches = command()
        .try_get_matches_from(normalize(argv))
        .map_err(|e| {
            if e.use_stderr() {
                Stop::Invalid(Invalid::Flag(e))
            } else {
                Stop::Help(e)
            }
        })?;
    let cli = Cli::from_arg_matches(&matches).map_err(|e| Stop::Invalid(Invalid::Flag(e)))?;
    check_subcommand(&cli).map_err(Stop::Invalid)?;
    Ok(cli)
}

/// Rewrites `_` to `-` in flag names, as pflag's word-separator normalisation does; values and
/// everything after `--` are left alone.
fn normalize<I, T>(argv: I) -> Vec<OsString>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString>,
{
    let mut rest_is_positional = false;
    argv.into_iter()
        .map(Into::into)
        .map(|arg| {
            let Some(text) = arg.to_str() else {
                return arg;
            };
            if rest_is_positional || !text.starts_with("--") {
                return arg;
            }
            if text == "--" {
                rest_is_positional = true;
                return arg;
            }
            match text.split_once('=') {
                Some((name, value)) => format!("{}={value}", name.replace('_', "-")).into(),
                None => text.replace('_', "-").into(),
            }
        })
        .collect()
}

/// A subcommand takes its flags after its name, and not the proxy's one-shot flags.
fn check_subcommand(cli: &Cli) -> Result<(), Invalid> {
    let (subcommand, flags) = match &cli.command {
        None => return Ok(()),
        Some(Command::Plan(args)) => ("plan", &args.flags),
        Some(Command::Explain(args)) => ("explain", &args.flags),
        Some(Command::Status(args)) => ("status", &args.flags),
    };
    if cli.flags != Flags::default() {
        return Err(Invalid::FlagsBeforeSubcommand { subcommand });
    }
    let given = flags.changed();
    match PROXY_ONLY.iter().find(|(_, flag)| given.contains(flag)) {
        Some(&(_, flag)) => Err(Invalid::ProxyOnly { subcommand, flag }),
        None => Ok(()),
    }
}

/// One line for a clap error: the flag and what it takes, or the nearest known flag.
fn one_line(e: &clap::Error) -> String {
    let context = |kind| e.get(kind).map(ToString::to_string);
    // `--kube-api-qps <QPS>`, `--masquerade-all[=<BOOL>]` → the flag alone
    let flag = context(ContextKind::InvalidArg).map(|a| {
        a.split([' ', '=', '['])
            .next()
            .unwrap_or_default()
            .to_owned()
    });
    match (e.kind(), flag) {
        (ErrorKind::UnknownArgument, Some(arg)) => {
            let what = if arg.starts_with('-') {
                format!("unknown flag {arg}")
            } else {
                format!("unexpected argument {arg:?}")
            };
            match context(ContextKind::SuggestedArg) {
                Some(near) => format!("{what}; did you mean {near}?"),
                None => format!("{what} (see --help)"),
            }
        }
        (ErrorKind::ValueValidation, Some(arg)) => match std::error::Error::source(e) {
            Some(reason) => format!("{arg}: {reason}"),
            None => format!("{arg}: invalid value"),
        },
        (ErrorKind::InvalidValue, Some(arg)) => {
            let value = context(ContextKind::InvalidValue).unwrap_or_default();
            match context(ContextKind::ValidValue) {
                Some(valid) => format!("{arg}: must be one of {valid}, got {value:?}"),
                None => format!("{arg}: needs a value"),
            }
        }
        _ => {
            let text = e.to_string();
            let first = text.lines().next().unwrap_or("invalid arguments");
            format!("{} (see --help)", first.trim_start_matches("error: "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str]) -> Result<Cli, Stop> {
        parse(std::iter::once("kube-proxy-rs").chain(args.iter().copied()))
    }

    fn invalid(args: &[&str]) -> String {
        match run(args) {
            Err(Stop::Invalid(invalid)) => invalid.to_string(),
            other => panic!("{args:?}: expected an error, got {other:?}"),
        }
    }

    #[test]
    fn a_misspelled_flag_names_the_nearest_one() {
        assert_eq!(
            invalid(&["--proxy-mod=ipvs"]),
            "unknown flag --proxy-mod; did you mean --proxy-mode?"
        );
        assert_eq!(
            invalid(&["plan", "--hostname-overide=a"]),
            "unknown flag --hostname-overide; did you mean --hostname-override?"
        );
        assert_eq!(invalid(&["--zzzz"]), "unknown flag --zzzz (see --help)");
    }

    #[test]
    fn a_bad_value_names_the_flag_and_what_it_takes() {
        assert_eq!(
            invalid(&["--kube-api-qps=fast"]),
            "--kube-api-qps: must be a number such as 5 or 0.5, got \"fast\""
        );
        assert_eq!(
            invalid(&["--kube-api-burst", "ten"]),
            "--kube-api-burst: must be a whole number such as 10 or -999, got \"ten\""
        );
        assert_eq!(
            invalid(&["--masquerade-all=maybe"]),
            "--masquerade-all: must be true or false, got \"maybe\""
        );
        assert_eq!(
            invalid(&["-v=loud"]),
            "--v: must be a whole number from 0 to 2147483647, got \"loud\""
        );
        assert_eq!(
            invalid(&["--version=yes"]),
            "--version: must be one of true, false, raw, got \"yes\""
        );
        for line in [
            invalid(&["--log-text-info-buffer-size=lots"]),
            invalid(&["--iptables-sync-period=soon"]),
        ] {
            assert!(line.starts_with("--"), "{line}");
            assert!(
                line.contains("\"lots\"") || line.contains("\"soon\""),
                "{line}"
            );
        }
    }

    #[test]
    fn underscores_in_flag_names_mean_dashes_as_in_pflag() {
        let cli = run(&["--proxy_mode=ipvs", "--hostname_override", "node_a"]).unwrap();
        assert_eq!(cli.flags.proxy_mode.as_deref(), Some("ipvs"));
        assert_eq!(cli.flags.hostname_override.as_deref(), Some("node_a"));
        let cli = run(&["--pod_bridge_interface=br_0"]).unwrap();
        assert_eq!(cli.flags.pod_bridge_interface.as_deref(), Some("br_0"));
    }

    #[test]
    fn a_flag_given_twice_keeps_its_last_value_and_lists_add_up() {
        let cli = run(&[
            "--proxy-mode=iptables",
            "--proxy-mode=nftables",
            "--vmodule=a=1",
            "--vmodule=b=2,c=3",
        ])
        .unwrap();
        assert_eq!(cli.flags.proxy_mode.as_deref(), Some("nftables"));
        assert_eq!(
            cli.flags.vmodule.as_deref(),
            Some(&["a=1".to_owned(), "b=2".to_owned(), "c=3".to_owned()][..])
        );
    }

    #[test]
    fn subcommands_refuse_the_one_shot_flags() {
        for (args, want) in [
            (
                &["plan", "--cleanup", "--manifests=m"][..],
                "`plan` does not take --cleanup; it belongs to the proxy itself (no subcommand)",
            ),
            (
                &["plan", "--write-config-to=/tmp/x", "--manifests=m"],
                "`plan` does not take --write-config-to; it belongs to the proxy itself (no \
                 subcommand)",
            ),
            (
                &["status", "--init-only"],
                "`status` does not take --init-only; it belongs to the proxy itself (no \
                 subcommand)",
            ),
            (
                &["--masquerade-all", "plan"],
                "give flags after `plan`, not before it",
            ),
        ] {
            assert_eq!(invalid(args), want, "{args:?}");
        }
        let help = command()
            .find_subcommand_mut("plan")
            .unwrap()
            .render_help()
            .to_string();
        assert!(!help.contains("--cleanup"), "{help}");
        assert!(help.contains("--masquerade-all"), "{help}");
    }

    /// Every flag's help says "Not acted on" exactly when the list names it: the start-up
    /// warnings and `--help` read the same list.
    #[test]
    fn help_marks_exactly_the_listed_flags_as_not_acted_on() {
        let listed: std::collections::BTreeSet<&str> =
            not_acted_on::LIST.iter().filter_map(|s| s.flag).collect();
        let mut root = command();
        let mut commands = vec![root.clone()];
        commands.extend(root.get_subcommands_mut().map(|c| c.clone()));
        for cmd in commands {
            let marked: std::collections::BTreeSet<&str> = cmd
                .get_arguments()
                .filter(|a| {
                    a.get_help()
                        .is_some_and(|h| h.to_string().contains("Not acted on"))
                })
                .filter_map(|a| a.get_long())
                .collect();
            assert_eq!(marked, listed, "{}", cmd.get_name());
        }
        let help = command().render_help().to_string();
        assert!(
            help.contains("[Not acted on: kube-proxy-rs serves no /debug/pprof]"),
            "{help}"
        );
    }

    #[test]
    fn the_command_definition_is_consistent() {
        command().debug_assert();
    }
}
