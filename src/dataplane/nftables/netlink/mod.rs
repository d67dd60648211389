//! The nf_tables netlink encoder and dump reader: [`Transaction`]s go to the kernel as one
//! nf_tables batch over a netlink socket, and our table comes back as a [`Ruleset`] from
//! `GET*` dumps, without `nft` in between.
//!
//! Why: `nft -f` spends seconds parsing a large ruleset and `nft list` tens of seconds
//! printing one (`notes/nft-scale.md`, issue 12); the kernel itself needs a fraction of that.
//!
//! Why our own message types: no maintained Apache-compatible crate covers nf_tables without
//! linking libnftnl (GPL), and the rust-netlink family has none for it. So sockets come from
//! `netlink-sys`, and the framing, expressions and objects are written here, each in its own
//! file, typed values kept apart from bytes:
//! - [`uapi`]: the kernel's numbers and nft's userdata tags;
//! - [`attr`]: messages and attributes, written and read;
//! - [`expr`]: expressions as typed values ↔ attributes;
//! - [`rule`]: our typed rules ↔ expression lists shaped as nft shapes them;
//! - [`object`]: tables, chains, sets (with nft's userdata, so `nft list` prints our `typeof`
//!   and comments) and elements;
//! - [`batch`]: transactions → one batch, every message acknowledged and traced to its op;
//! - [`exchange`]: batch acknowledgements and dumps as state machines, no I/O;
//! - [`dump`]: dump messages → [`Ruleset`];
//! - [`socket`]: the socket, in a chosen network namespace — the only I/O.
//!
//! The objects are the ones the text encoder makes: the kernel-side round trip test programs
//! every golden ruleset both ways and compares what nft lists.

pub mod attr;
pub mod batch;
pub mod dump;
pub mod exchange;
pub mod expr;
pub mod object;
pub mod rule;
pub mod socket;
pub mod uapi;

use super::diff::{Op, Transaction};
use super::parse::Parsed;
use super::render;
use super::ruleset::Family;
use exchange::Failure;

/// The errno the kernel answers for a table that does not exist.
const ENOENT: i32 = 2;
/// Failing operations quoted in an error.
const QUOTED_FAILURES: usize = 3;
/// Characters of an operation's text quoted in an error (element lists are long).
const QUOTE_WIDTH: usize = 240;

/// Why a netlink apply or dump failed. A refused batch changed nothing.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Socket(#[from] socket::Error),
    #[error(transparent)]
    Unencodable(#[from] batch::Unencodable),
    /// The kernel refused the batch: which operation, and why.
    #[error("{message}")]
    Refused {
        message: String,
        /// The failing operations as nft text, numbered by their place in the batch.
        context: String,
    },
    #[error("the kernel refused the {what} dump: {}", std::io::Error::from_raw_os_error(*errno))]
    DumpRefused { what: &'static str, errno: i32 },
}

/// Programs and reads our tables over netlink. Opens its socket on first use and again after
/// a socket error.
pub struct Netlink {
    netns: Option<String>,
    socket: Option<socket::Socket>,
    known: batch::Known,
}

impl Netlink {
    /// In the caller's network namespace.
    pub fn new() -> Netlink {
        Netlink {
            netns: None,
            socket: None,
            known: batch::Known::default(),
        }
    }

    /// In the named network namespace (`ip netns` names).
    pub fn in_netns(name: &str) -> Netlink {
        Netlink {
            netns: Some(name.to_owned()),
            ..Netlink::new()
        }
    }

    fn socket(&mut self) -> Result<&mut socket::Socket, Error> {
        if self.socket.is_none() {
            self.socket = Some(socket::Socket::open(self.netns.as_deref())?);
        }
        Ok(self.socket.as_mut().expect("just opened"))
    }

    /// Applies `transactions` as one atomic batch.
    pub fn apply(&mut self, transactions: &[Transaction]) -> Result<(), Error> {
        let mut known = self.known.clone();
        for t in transactions {
            known.learn(t);
        }
        let first = self.socket()?.next_seq();
        let batch = batch::encode(transactions, &known, first)?;
        if batch.is_empty() {
            return Ok(());
        }
        let failures = match self.socket()?.apply(&batch) {
            Ok(f) => f,
            Err(e) => {
                self.socket = None;
                return Err(e.into());
            }
        };
        if failures.is_empty() {
            self.known = known;
            return Ok(());
        }
        Err(refused(transactions, &failures))
    }

    /// Our table of `family` as the kernel holds it; `None` when there is none.
    pub fn dump(&mut self, family: Family) -> Result<Option<Parsed>, Error> {
        let result = self.read(family);
        if let Err(Error::Socket(_)) = &result {
            self.socket = None;
        }
        if let Ok(Some(p)) = &result {
            // What the kernel holds is what later rules are shaped for.
            self.known.interval.retain(|(f, _)| *f != family);
            for (name, set) in &p.ruleset.sets {
                if set.decl.interval {
                    self.known.interval.insert((family, name.clone()));
                }
            }
        }
        result
    }

    fn read(&mut self, family: Family) -> Result<Option<Parsed>, Error> {
        use uapi::{chain, msg, set};
        let nfproto = rule::Layout { family }.nfproto();
        let table = super::names::TABLE;
        let s = self.socket()?;
        let exists = s.request(msg::GETTABLE, nfproto, false, &|w| {
            w.str(uapi::table::NAME, table)
        })?;
        match exists.errno {
            Some(ENOENT) => return Ok(None),
            Some(errno) => {
                return Err(Error::DumpRefused {
                    what: "table",
                    errno,
                });
            }
            None => {}
        }
        // Objects changing while we read show as an interrupted dump: read again, a few times.
        for _ in 0..3 {
            let chains = dumped(
                s.request(msg::GETCHAIN, nfproto, true, &|w| {
                    w.str(chain::TABLE, table)
                })?,
                "chain",
            )?;
            let sets = dumped(
                s.request(msg::GETSET, nfproto, true, &|w| w.str(set::TABLE, table))?,
                "set",
            )?;
            let rules = dumped(
                s.request(msg::GETRULE, nfproto, true, &|w| {
                    w.str(uapi::rule::TABLE, table)
                })?,
                "rule",
            )?;
            let mut elements = std::collections::BTreeMap::new();
            let mut interrupted = chains.1 || sets.1 || rules.1;
            for body in &sets.0 {
                let Some(name) = dump::wants_elements(body) else {
                    continue;
                };
                let (bodies, intr) = dumped(
                    s.request(msg::GETSETELEM, nfproto, true, &|w| {
                        w.str(uapi::elem::LIST_TABLE, table);
                        w.str(uapi::elem::LIST_SET, name);
                    })?,
                    "element",
                )?;
                interrupted |= intr;
                elements.insert(name.to_owned(), bodies);
            }
            if interrupted {
                continue;
            }
            let lookup = |name: &str| elements.get(name).cloned().unwrap_or_default();
            return Ok(Some(dump::read(
                family, &chains.0, &rules.0, &sets.0, &lookup,
            )));
        }
        Err(Error::DumpRefused {
            what: "table (changing while read)",
            errno: 11, // EAGAIN
        })
    }
}

impl Default for Netlink {
    fn default() -> Netlink {
        Netlink::new()
    }
}

/// A dump's message bodies and whether it was interrupted, or its error.
fn dumped(d: exchange::Dump, what: &'static str) -> Result<(Vec<Vec<u8>>, bool), Error> {
    match d.errno {
        Some(errno) => Err(Error::DumpRefused { what, errno }),
        None => Ok((d.bodies, d.interrupted)),
    }
}

/// The kernel's refusal as an error naming the operations, with their nft text.
fn refused(transactions: &[Transaction], failures: &[Failure]) -> Error {
    let describe = |f: &Failure| {
        let reason = std::io::Error::from_raw_os_error(f.errno).to_string();
        let reason = match &f.message {
            Some(m) => format!("{reason}: {m}"),
            None => reason,
        };
        match f
            .origin
            .and_then(|o| Some((o, transactions.get(o.transaction)?)))
        {
            Some((o, t)) => format!(
                "the kernel refused operation {} of the {:?} transaction: {reason}",
                o.op + 1,
                t.family
            ),
            None => format!("the kernel refused the batch: {reason}"),
        }
    };
    let mut message = describe(&failures[0]);
    if failures.len() > 1 {
        message.push_str(&format!(" (and {} more)", failures.len() - 1));
    }
    let context = failures
        .iter()
        .filter_map(|f| {
            let o = f.origin?;
            let t = transactions.get(o.transaction)?;
            let op: &Op = t.ops.get(o.op)?;
            let text = render::render(&Transaction {
                family: t.family,
                ops: vec![op.clone()],
            });
            let first = text.lines().next().unwrap_or("");
            let cut: String = first.chars().take(QUOTE_WIDTH).collect();
            let more = if cut.len() < first.len() { " ..." } else { "" };
            Some(format!(">{:>6} | {cut}{more}", o.op + 1))
        })
        .take(QUOTED_FAILURES)
        .collect::<Vec<_>>()
        .join("\n");
    Error::Refused { message, context }
}
