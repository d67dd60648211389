//! The nf_tables netlink encoder and dump reader: [`crate::nft::Transaction`]s go to the
//! kernel as one nf_tables batch over a netlink socket, and our table comes back as a
//! [`crate::nft::Ruleset`] from `GET*` dumps, without `nft` in between.
//!
//! Why: `nft -f` parsing a large ruleset and `nft list` printing one take far longer than the
//! kernel needs to apply or dump it (docs/benchmarks.md, "netlink encoder against `nft -f`").
//!
//! Why our own message types: no maintained Apache-compatible crate covers nf_tables without
//! linking libnftnl (GPL), and the rust-netlink family has none for it. So the socket and the
//! framing come from our netlink core ([`crate::netlink`], over `netlink-sys`), and nf_tables'
//! expressions and objects are written here, each in its own file, typed values kept apart
//! from bytes:
//! - [`uapi`]: the kernel's numbers and nft's userdata tags;
//! - [`expr`]: expressions as typed values ↔ attributes;
//! - [`rule`]: our typed rules ↔ expression lists shaped as nft shapes them;
//! - [`object`]: tables, chains, sets (with nft's userdata, so `nft list` prints our `typeof`
//!   and comments) and elements;
//! - [`batch`]: transactions → one batch, every message acknowledged and traced to its op;
//! - [`dump`]: dump messages → a `Ruleset`;
//! - `by_key`: large sets read by asking for the planned keys instead, when the plan is known
//!   (a hash set's dump is quadratic in the kernel; see [`Netlink::dump_expecting`]).
//!
//! From the core come the socket (opened in a chosen network namespace; the only I/O),
//! message and attribute framing, the nfgenmsg header and batch frame
//! ([`crate::netlink::nfnetlink`]), and the acknowledgement and dump state machines that
//! [`Netlink`] drives here. A batch is followed by a barrier request (`GETGEN`): netlink
//! answers in order, so once the barrier is answered every answer to the batch, including a
//! commit error addressed to `BATCH_BEGIN`, has arrived.
//!
//! The objects are the ones the text encoder makes: the kernel-side round trip test programs
//! every golden ruleset both ways and compares what nft lists.

pub mod batch;
mod by_key;
pub mod dump;
pub mod expr;
pub mod object;
pub mod rule;
pub mod uapi;

use std::sync::Arc;

use netlink_packet_core::{NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST};

use crate::netlink::batch::{Answer, Until};
use crate::netlink::message::messages;
use crate::netlink::socket::{self, Options, Protocol, Socket};
use crate::netlink::writer::Writer;
use crate::netlink::{attr, dump::Dump, nfnetlink};
use crate::nft::adopt::Parsed;
use crate::nft::diff::{Op, Transaction};
use crate::nft::render;
use crate::nft::ruleset::{Family, Ruleset};

/// nf_tables' socket, as errors name it.
pub const PROTOCOL: Protocol =
    nfnetlink::protocol("an nf_tables netlink socket", "nf_tables netlink");
/// Room for the acknowledgements of a large batch (one per message, 36 bytes each capped).
const RECEIVE_BUFFER: usize = 8 << 20;
/// Short acknowledgements, the kernel's reason with an error, and room for many of them.
const OPTIONS: Options = Options {
    cap_ack: true,
    ext_ack: true,
    receive_buffer: Some(RECEIVE_BUFFER),
};

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
    socket: Option<Socket>,
    /// A second socket, for reading a large set's keys on two CPUs at once (the kernel answers
    /// element lookups without a lock, in the asking thread).
    helper: Option<Socket>,
    known: batch::Known,
    /// Sets the last read took by key rather than by dump.
    read_by_key: usize,
    /// Netlink messages sent through sockets already dropped (after a socket error), so the
    /// count survives a reopen.
    sent_before: u64,
}

impl Netlink {
    /// In the caller's network namespace.
    pub fn new() -> Netlink {
        Netlink {
            netns: None,
            socket: None,
            helper: None,
            known: batch::Known::default(),
            read_by_key: 0,
            sent_before: 0,
        }
    }

    /// In the named network namespace (`ip netns` names).
    pub fn in_netns(name: &str) -> Netlink {
        Netlink {
            netns: Some(name.to_owned()),
            ..Netlink::new()
        }
    }

    fn socket(&mut self) -> Result<&mut Socket, Error> {
        if self.socket.is_none() {
            self.socket = Some(Socket::open(PROTOCOL, self.netns.as_deref(), OPTIONS)?);
        }
        Ok(self.socket.as_mut().expect("just opened"))
    }

    /// The port id of the socket that commits (opened first if needed): the monitor tells our
    /// own transactions by it.
    pub fn port_id(&mut self) -> Result<u32, Error> {
        Ok(self.socket()?.port_id()?)
    }

    /// The socket, and the helper socket when this machine has more than one CPU.
    fn sockets(&mut self) -> Result<(&mut Socket, Option<&mut Socket>), Error> {
        let parallel = std::thread::available_parallelism().is_ok_and(|n| n.get() > 1);
        if parallel && self.helper.is_none() {
            self.helper = Some(Socket::open(PROTOCOL, self.netns.as_deref(), OPTIONS)?);
        }
        self.socket()?;
        let socket = self.socket.as_mut().expect("just opened");
        Ok((socket, self.helper.as_mut()))
    }

    /// Drops the sockets after an error (the next call opens fresh ones), keeping their count.
    fn forget_socket(&mut self) {
        for s in [self.socket.take(), self.helper.take()]
            .into_iter()
            .flatten()
        {
            self.sent_before += s.messages_sent();
        }
    }

    /// Netlink messages sent so far by every socket this encoder opened: batches (each
    /// message of one), their barriers, generation requests and dump requests.
    pub fn messages_sent(&self) -> u64 {
        self.sent_before
            + [&self.socket, &self.helper]
                .into_iter()
                .flatten()
                .map(Socket::messages_sent)
                .sum::<u64>()
    }

    /// How many sets the last read took by key rather than by dump (for tests and logs).
    pub fn read_by_key(&self) -> usize {
        self.read_by_key
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
        let failures = match commit(self.socket()?, batch) {
            Ok(f) => f,
            Err(e) => {
                self.forget_socket();
                return Err(e.into());
            }
        };
        if failures.is_empty() {
            self.known = known;
            return Ok(());
        }
        Err(refused(transactions, &failures))
    }

    /// The ruleset generation (`GETGEN`), which every committed transaction, anyone's, moves
    /// on by one; `None` if the kernel's answer carried none.
    pub fn generation(&mut self) -> Result<Option<u32>, Error> {
        let answer = match request(
            self.socket()?,
            uapi::msg::GETGEN,
            uapi::NFPROTO_UNSPEC,
            false,
            &|_| {},
        ) {
            Ok(a) => a,
            Err(e) => {
                self.forget_socket();
                return Err(e.into());
            }
        };
        if let Some(errno) = answer.errno {
            return Err(Error::DumpRefused {
                what: "generation",
                errno,
            });
        }
        Ok(answer
            .bodies
            .iter()
            .find_map(|b| attr::find_be32(nfnetlink::attributes(b), uapi::GEN_ID)))
    }

    /// Our table of `family` as the kernel holds it; `None` when there is none.
    pub fn dump(&mut self, family: Family) -> Result<Option<Parsed>, Error> {
        self.dump_expecting(family, None)
    }

    /// The keys of dynamic set `set` of our `family` table (the clients an affinity set
    /// remembers), for `explain`; empty when there is no such set. Elements change while a
    /// dump runs (new clients, expiries), so an interrupted dump gives what it got.
    pub fn dynamic_keys(
        &mut self,
        family: Family,
        set: &str,
        decl: &crate::nft::ruleset::SetDecl,
    ) -> Result<Vec<crate::nft::ruleset::Tuple>, Error> {
        let nfproto = rule::Layout { family }.nfproto();
        let table = crate::nft::TABLE;
        let s = self.socket()?;
        let answer = request(s, uapi::msg::GETSETELEM, nfproto, true, &|w| {
            w.str(uapi::elem::LIST_TABLE, table);
            w.str(uapi::elem::LIST_SET, set);
        })?;
        if answer.errno == Some(ENOENT) {
            return Ok(Vec::new());
        }
        let (bodies, _interrupted) = dumped(answer, "element")?;
        Ok(dump::keys(family, decl, &bodies))
    }

    /// Every base chain of every `ip`, `ip6` and `inet` table, ours included: whose rules a
    /// packet meets besides ours, for `explain`.
    pub fn base_chains(&mut self) -> Result<Vec<dump::BaseChainSummary>, Error> {
        let s = self.socket()?;
        let answer = request(s, uapi::msg::GETCHAIN, uapi::NFPROTO_UNSPEC, true, &|_| {})?;
        let (bodies, _interrupted) = dumped(answer, "chain")?;
        Ok(bodies
            .iter()
            .filter_map(|b| dump::base_chain_summary(b))
            .collect())
    }

    /// Every table of the `ip`, `ip6` and `inet` families, anyone's, as (family, name).
    pub fn tables(&mut self) -> Result<Vec<(&'static str, String)>, Error> {
        let s = self.socket()?;
        let answer = request(s, uapi::msg::GETTABLE, uapi::NFPROTO_UNSPEC, true, &|_| {})?;
        let (bodies, _interrupted) = dumped(answer, "table")?;
        Ok(bodies
            .iter()
            .filter_map(|b| dump::table_summary(b))
            .collect())
    }

    /// [`Netlink::dump`], knowing what the table should hold: large sets whose declaration is
    /// as planned are read by asking for the planned keys and comparing the kernel's element
    /// count, not by dumping them. Same result as a dump.
    pub fn dump_expecting(
        &mut self,
        family: Family,
        want: Option<&Ruleset>,
    ) -> Result<Option<Parsed>, Error> {
        let result = self.read(family, want);
        if let Err(Error::Socket(_)) = &result {
            self.forget_socket();
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

    fn read(&mut self, family: Family, want: Option<&Ruleset>) -> Result<Option<Parsed>, Error> {
        use uapi::{chain, msg, set};
        let nfproto = rule::Layout { family }.nfproto();
        let table = crate::nft::TABLE;
        self.read_by_key = 0;
        let mut by_key_sets = 0;
        let (s, mut helper) = self.sockets()?;
        let exists = request(s, msg::GETTABLE, nfproto, false, &|w| {
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
                request(s, msg::GETCHAIN, nfproto, true, &|w| {
                    w.str(chain::TABLE, table)
                })?,
                "chain",
            )?;
            let sets = dumped(
                request(s, msg::GETSET, nfproto, true, &|w| w.str(set::TABLE, table))?,
                "set",
            )?;
            let rules = dumped(
                request(s, msg::GETRULE, nfproto, true, &|w| {
                    w.str(uapi::rule::TABLE, table)
                })?,
                "rule",
            )?;
            let mut elements = std::collections::BTreeMap::new();
            let mut read = std::collections::BTreeMap::new();
            let mut interrupted = chains.1 || sets.1 || rules.1;
            for body in &sets.0 {
                let Some(name) = dump::wants_elements(body) else {
                    continue;
                };
                if let Some(found) = by_key::by_key(s, helper.as_deref_mut(), family, body, want)? {
                    read.insert(name.to_owned(), found);
                    by_key_sets += 1;
                    continue;
                }
                let (bodies, intr) = dumped(
                    request(s, msg::GETSETELEM, nfproto, true, &|w| {
                        w.str(uapi::elem::LIST_TABLE, table);
                        w.str(uapi::elem::LIST_SET, name);
                    })?,
                    "element",
                )?;
                interrupted |= intr;
                elements.insert(name.to_owned(), bodies);
            }
            if interrupted {
                by_key_sets = 0;
                continue;
            }
            let lookup = |name: &str| match read.get(name) {
                Some(found) => dump::SetElements::Read(Arc::clone(found)),
                None => dump::SetElements::Answers(elements.get(name).map_or(&[], |b| &b[..])),
            };
            let parsed = dump::read(family, &chains.0, &rules.0, &sets.0, &lookup);
            self.read_by_key = by_key_sets;
            return Ok(Some(parsed));
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
fn dumped(d: Answered, what: &'static str) -> Result<(Vec<Vec<u8>>, bool), Error> {
    match d.errno {
        Some(errno) => Err(Error::DumpRefused { what, errno }),
        None => Ok((d.bodies, d.interrupted)),
    }
}

/// The answer to one request: the bodies of its messages (nfgenmsg header included), and how
/// it ended.
struct Answered {
    bodies: Vec<Vec<u8>>,
    errno: Option<i32>,
    interrupted: bool,
}

/// Sends one request of `kind` (a dump with `dump`), with the attributes `attrs` writes; reads
/// every message of its answer.
fn request(
    s: &mut Socket,
    kind: u16,
    family: u8,
    dump: bool,
    attrs: &dyn Fn(&mut Writer),
) -> Result<Answered, socket::Error> {
    let mut bodies = Vec::new();
    let ended = request_each(s, kind, family, dump, attrs, &mut |b| {
        bodies.push(b.to_vec())
    })?;
    Ok(Answered {
        bodies,
        errno: ended.errno,
        interrupted: ended.interrupted,
    })
}

/// How an answer ended.
struct Ended {
    errno: Option<i32>,
    interrupted: bool,
}

/// [`request`], giving each message's body to `each` as it is received instead of keeping it.
fn request_each(
    s: &mut Socket,
    kind: u16,
    family: u8,
    dump: bool,
    attrs: &dyn Fn(&mut Writer),
    each: &mut dyn FnMut(&[u8]),
) -> Result<Ended, socket::Error> {
    let seq = s.take_seq();
    let mut w = Writer::default();
    let flags = NLM_F_REQUEST | if dump { NLM_F_DUMP } else { NLM_F_ACK };
    let kind = nfnetlink::kind(uapi::SUBSYS, kind);
    let m = nfnetlink::begin(&mut w, kind, flags, seq, family, 0);
    attrs(&mut w);
    w.end(m);
    s.send(&w.buf, "request")?;
    let mut answer = Dump::new(seq);
    while !answer.done() {
        for m in messages(s.recv("dump")?) {
            if answer.receive(&m) {
                each(m.body);
            }
        }
    }
    Ok(Ended {
        errno: answer.errno(),
        interrupted: answer.interrupted(),
    })
}

/// Sends `batch` and a barrier after it; returns what the kernel refused (empty: the batch
/// was committed).
fn commit(s: &mut Socket, batch: batch::Batch) -> Result<Vec<Failure>, socket::Error> {
    // After BATCH_END, which takes the number after the last message's.
    let barrier = batch.acknowledged().end.wrapping_add(1);
    let (bytes, mut acks) = batch.send(Until::Barrier(barrier));
    s.send(&bytes, "batch")?;
    s.set_next_seq(barrier.wrapping_add(1));
    let mut w = Writer::default();
    let kind = nfnetlink::kind(uapi::SUBSYS, uapi::msg::GETGEN);
    let flags = NLM_F_REQUEST | NLM_F_ACK;
    let m = nfnetlink::begin(&mut w, kind, flags, barrier, uapi::NFPROTO_UNSPEC, 0);
    w.end(m);
    s.send(&w.buf, "barrier")?;
    let mut failures = Vec::new();
    while !acks.done() {
        for m in messages(s.recv("acknowledgements")?) {
            failures.extend(acks.receive(&m).filter(|a| a.errno != 0));
        }
    }
    Ok(failures)
}

/// One message the kernel refused: its operation (`None`: the whole batch, at commit).
type Failure = Answer<batch::Origin>;

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
