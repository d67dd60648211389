//! A blocking rtnetlink client for the dummy link: one socket (in the caller's network
//! namespace or a named one) and one method per operation, each answered before it returns.
//!
//! The thin I/O: requests come from [`super::message`], answers are followed with the core's
//! [`Dump`] state machine and address changes with [`super::exchange::Update`]; the only
//! decisions here are which errno means what. Needs `CAP_NET_ADMIN` in the namespace for
//! everything but the address dump.

use std::collections::BTreeSet;
use std::net::IpAddr;

use netlink_sys::protocols::NETLINK_ROUTE;

use super::addresses::{AddressChanges, LinkAddresses};
use super::exchange::{Refusal, Update, Updated};
use super::message::{self, Link};
use crate::netlink::dump::Dump;
use crate::netlink::message::{self as framing, FramingError, Message};
use crate::netlink::socket::{self, Options, Protocol, Socket};

/// rtnetlink's socket, as errors name it.
pub const PROTOCOL: Protocol = Protocol {
    number: NETLINK_ROUTE,
    socket: "an rtnetlink socket",
    name: "rtnetlink",
};
/// Short acknowledgements, and the kernel's reason with an error.
const OPTIONS: Options = Options {
    cap_ack: true,
    ext_ack: true,
    receive_buffer: None,
};

/// `EEXIST`: on creating a link, one of that name exists.
const EEXIST: i32 = 17;
/// `ENODEV`: no link of that name or index.
const ENODEV: i32 = 19;

/// Why an operation on the dummy link failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Socket(#[from] socket::Error),
    #[error("rtnetlink reply is malformed")]
    Framing(#[from] FramingError),
    /// The kernel refused a request.
    #[error("the kernel refused to {operation}: {}{}", std::io::Error::from_raw_os_error(*errno), text(message))]
    Refused {
        /// What was asked, naming the link: "create dummy link kube-ipvs0".
        operation: String,
        /// Positive errno.
        errno: i32,
        /// The kernel's extended-ack text, when it gave one.
        message: Option<String>,
    },
    /// A link of that name exists and is not a dummy: someone else's, left alone.
    #[error(
        "a link named {name} exists but is {}, not a dummy; the IPVS mode binds service \
         addresses to a dummy link of that name, so remove or rename that link",
        kind.as_deref().map(|k| format!("a {k} link")).unwrap_or_else(|| "a link without a kind".into())
    )]
    NotDummy { name: String, kind: Option<String> },
    /// The kernel acknowledged creating the link, then did not know it.
    #[error("the kernel created link {name} but then had none of that name")]
    Vanished { name: String },
    /// The kernel refused some of the address changes; the others were made.
    #[error(
        "the kernel refused to {} on {link}: {}{}{}",
        first.op,
        std::io::Error::from_raw_os_error(first.errno),
        text(&first.message),
        if *more > 0 { format!(" (and {more} more address changes)") } else { String::new() }
    )]
    Addresses {
        link: String,
        first: Refusal,
        /// Further refusals.
        more: usize,
        /// Everything the update did, the refusals included.
        updated: Box<Updated>,
    },
}

fn text(message: &Option<String>) -> String {
    message
        .as_ref()
        .map(|m| format!(": {m}"))
        .unwrap_or_default()
}

impl Error {
    /// The kernel's errno, when it refused a request.
    pub fn errno(&self) -> Option<i32> {
        match self {
            Error::Refused { errno, .. } => Some(*errno),
            Error::Addresses { first, .. } => Some(first.errno),
            _ => None,
        }
    }
}

/// An rtnetlink socket.
pub struct Client {
    socket: Socket,
}

/// A request's answer: its objects, or the kernel's refusal (errno, text).
type Answer = Result<Vec<Vec<u8>>, (i32, Option<String>)>;

impl Client {
    /// Opens a socket in the named network namespace (`ip netns` names), or the caller's.
    pub fn open(netns: Option<&str>) -> Result<Client, Error> {
        Ok(Client {
            socket: Socket::open(PROTOCOL, netns, OPTIONS)?,
        })
    }

    /// Netlink messages this client has sent, for the sync's count of them.
    pub fn messages_sent(&self) -> u64 {
        self.socket.messages_sent()
    }

    /// The link named `name`, if there is one.
    pub fn find(&mut self, name: &str) -> Result<Option<Link>, Error> {
        let seq = self.socket.take_seq();
        match self.exchange(&message::get_link(name, seq), seq)? {
            Ok(objects) => Ok(objects
                .iter()
                .find_map(|bytes| framing::messages(bytes).find_map(|m| message::link(&m)))),
            Err((ENODEV, _)) => Ok(None),
            Err((errno, message)) => Err(Error::Refused {
                operation: format!("look up link {name}"),
                errno,
                message,
            }),
        }
    }

    /// Makes sure a dummy link named `name` exists, and returns it. Creates it, down, when
    /// there is none; one that exists is kept as it is (up or down, with its addresses), as
    /// upstream keeps it. A link of that name of another kind is an error: it is not ours.
    pub fn ensure_dummy(&mut self, name: &str) -> Result<Link, Error> {
        let seq = self.socket.take_seq();
        match self.exchange(&message::new_dummy_link(name, seq), seq)? {
            Ok(_) | Err((EEXIST, _)) => {}
            Err((errno, message)) => {
                return Err(Error::Refused {
                    operation: format!("create dummy link {name}"),
                    errno,
                    message,
                });
            }
        }
        let link = self.find(name)?.ok_or_else(|| Error::Vanished {
            name: name.to_owned(),
        })?;
        if !link.is_dummy() {
            return Err(Error::NotDummy {
                name: link.name,
                kind: link.kind,
            });
        }
        Ok(link)
    }

    /// Deletes the dummy link named `name`, and with it its addresses and their local
    /// routes (for `--cleanup`). `false` when there was none. A link of that name of
    /// another kind is an error and stays.
    pub fn delete_dummy(&mut self, name: &str) -> Result<bool, Error> {
        let Some(link) = self.find(name)? else {
            return Ok(false);
        };
        if !link.is_dummy() {
            return Err(Error::NotDummy {
                name: link.name,
                kind: link.kind,
            });
        }
        let seq = self.socket.take_seq();
        match self.exchange(&message::delete_link(link.index, seq), seq)? {
            Ok(_) => Ok(true),
            Err((ENODEV, _)) => Ok(false),
            Err((errno, message)) => Err(Error::Refused {
                operation: format!("delete dummy link {name}"),
                errno,
                message,
            }),
        }
    }

    /// One address dump, sorted: what `link` holds, and the node addresses of every other
    /// interface. A sync reads this once and takes both from it.
    pub fn addresses(&mut self, link: &Link) -> Result<LinkAddresses, Error> {
        self.addresses_beside(link.index)
    }

    /// One address dump, sorted as [`Client::addresses`] sorts it, the dummy link being the
    /// interface numbered `link_index` (0, which no interface has: every address is
    /// elsewhere). For readers that must not create the link (`explain`, `status`).
    pub fn addresses_beside(&mut self, link_index: u32) -> Result<LinkAddresses, Error> {
        let seq = self.socket.take_seq();
        self.socket
            .send(&message::address_dump(seq), "address dump request")?;
        let mut dump = Dump::new(seq);
        let mut found = Vec::new();
        while !dump.done() {
            let datagram = self.socket.recv("address dump")?;
            framing::each(datagram, |m| {
                if dump.receive(&m)
                    && let Some(pair) = message::address(&m)
                {
                    found.push(pair);
                }
            })?;
        }
        if let Some(errno) = dump.errno() {
            return Err(Error::Refused {
                operation: "dump addresses".into(),
                errno,
                message: dump.message(),
            });
        }
        Ok(LinkAddresses::sort(link_index, found))
    }

    /// The addresses bound to `link`.
    #[doc(alias = "GetLocalAddresses")]
    pub fn bound_addresses(&mut self, link: &Link) -> Result<BTreeSet<IpAddr>, Error> {
        Ok(self.addresses(link)?.bound)
    }

    /// Every node address of this host except those on `link`: no loopback and no IPv6
    /// link-local addresses, both families (the caller picks its family). The NodePort
    /// virtual services' addresses when `nodePortAddresses` is not set.
    #[doc(alias = "GetAllLocalAddressesExcept")]
    pub fn local_addresses_except(&mut self, link: &Link) -> Result<BTreeSet<IpAddr>, Error> {
        Ok(self.addresses(link)?.elsewhere)
    }

    /// Binds and unbinds addresses on `link` (/32, /128). An address already bound, or
    /// already gone, counts as done. Every change is tried; when the kernel refused some,
    /// the error names the first and carries what was done.
    pub fn update(&mut self, link: &Link, changes: &AddressChanges) -> Result<Updated, Error> {
        let mut update = Update::new(link.index, changes, self.socket.next_seq());
        while let Some(batch) = update.next_batch() {
            self.socket.send(&batch, "address changes")?;
            while update.waiting() {
                update.receive(self.socket.recv("address change answers")?)?;
            }
        }
        self.socket.set_next_seq(update.next_seq());
        let updated = update.finish();
        match updated.refused.first() {
            None => Ok(updated),
            Some(first) => Err(Error::Addresses {
                link: link.name.clone(),
                first: first.clone(),
                more: updated.refused.len() - 1,
                updated: Box::new(updated),
            }),
        }
    }

    /// Sends one request and reads its whole answer: the messages it carried (each whole,
    /// header included), or the kernel's refusal.
    fn exchange(&mut self, request: &[u8], seq: u32) -> Result<Answer, Error> {
        self.socket.send(request, "request")?;
        let mut answer = Dump::new(seq);
        let mut objects = Vec::new();
        while !answer.done() {
            let datagram = self.socket.recv("answer")?;
            framing::each(datagram, |m: Message<'_>| {
                if answer.receive(&m) {
                    objects.push(m.bytes.to_vec());
                }
            })?;
        }
        Ok(match answer.errno() {
            Some(errno) => Err((errno, answer.message())),
            None => Ok(objects),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn errors_name_the_operation_the_address_and_the_kernel_s_text() {
        let refused = Error::Refused {
            operation: "create dummy link kube-ipvs0".into(),
            errno: 95,
            message: Some("Unknown device type".into()),
        };
        assert_eq!(
            refused.to_string(),
            "the kernel refused to create dummy link kube-ipvs0: Operation not supported \
             (os error 95): Unknown device type"
        );
        let first = Refusal {
            op: super::super::exchange::AddressOp::Bind(IpAddr::V4(Ipv4Addr::new(10, 96, 0, 1))),
            errno: 1,
            message: None,
        };
        let addresses = Error::Addresses {
            link: "kube-ipvs0".into(),
            first,
            more: 2,
            updated: Box::default(),
        };
        assert_eq!(
            addresses.to_string(),
            "the kernel refused to bind 10.96.0.1/32 on kube-ipvs0: Operation not permitted \
             (os error 1) (and 2 more address changes)"
        );
        assert_eq!(addresses.errno(), Some(1));
        let veth = Error::NotDummy {
            name: "kube-ipvs0".into(),
            kind: Some("veth".into()),
        };
        assert!(
            veth.to_string()
                .starts_with("a link named kube-ipvs0 exists but is a veth link, not a dummy"),
            "{veth}"
        );
    }
}
