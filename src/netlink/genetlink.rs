//! Generic netlink, the kernel's layer over `NETLINK_GENERIC` that IPVS (and many other
//! subsystems) talk through: the `genlmsghdr` after every netlink header, and resolving a
//! family's message type from its name with the `nlctrl` controller (`CTRL_CMD_GETFAMILY`).
//!
//! Pure encode and decode functions, plus [`resolve`], the one socket call: families get their
//! number when they register (when their module loads), so a user asks for it by name first.
//! Numbers are the kernel's ABI, from `include/uapi/linux/genetlink.h`.
//!
//! Why not `netlink-packet-generic` (MIT, rust-netlink): its `GenlMessage` wraps a payload
//! type that must implement its `GenlFamily` and `Emitable` traits and is serialised as a tree;
//! our users write attributes straight into the core's [`Writer`] and read slices back. This
//! layer is a four-byte header and one request, so sharing the core's framing costs less than a
//! second message model.

use netlink_packet_core::{NLM_F_ACK, NLM_F_REQUEST};
use netlink_sys::protocols::NETLINK_GENERIC;

use super::attr;
use super::dump::Dump;
use super::message::{self, FramingError};
use super::socket::{self, Protocol, Socket};
use super::writer::Writer;

/// `GENL_ID_CTRL`: the controller's fixed message type (`NLMSG_MIN_TYPE`).
pub const GENL_ID_CTRL: u16 = 0x10;
/// `CTRL_CMD_NEWFAMILY`: the controller's answer describing a family.
pub const CTRL_CMD_NEWFAMILY: u8 = 1;
/// `CTRL_CMD_GETFAMILY`: asks the controller about a family.
pub const CTRL_CMD_GETFAMILY: u8 = 3;
/// `CTRL_ATTR_FAMILY_ID`: the family's message type, a u16 in host order.
pub const CTRL_ATTR_FAMILY_ID: u16 = 1;
/// `CTRL_ATTR_FAMILY_NAME`: a NUL-terminated string.
pub const CTRL_ATTR_FAMILY_NAME: u16 = 2;
/// `CTRL_ATTR_VERSION`: the family's version, a u32 in host order.
pub const CTRL_ATTR_VERSION: u16 = 3;
/// The controller's own version, as `genl` sends it.
const CTRL_VERSION: u8 = 1;
/// `GENL_HDRLEN`: the `genlmsghdr` (cmd u8, version u8, reserved u16), already aligned.
pub const HEADER_LEN: usize = 4;
/// `ENOENT`: the controller knows no family of that name.
const ENOENT: i32 = 2;

/// A `NETLINK_GENERIC` protocol, named for errors as `socket` and `name` say.
pub const fn protocol(socket: &'static str, name: &'static str) -> Protocol {
    Protocol {
        number: NETLINK_GENERIC,
        socket,
        name,
    }
}

/// The controller's socket, as errors name it when a family is resolved on its own socket.
pub const CONTROLLER: Protocol = protocol("a generic netlink socket", "generic netlink");

/// The `genlmsghdr` of a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// The family's command (`IPVS_CMD_*`, `CTRL_CMD_*`).
    pub cmd: u8,
    pub version: u8,
}

/// Starts a message to `family` with its netlink and generic netlink headers; close it with
/// [`Writer::end`].
pub fn begin(w: &mut Writer, family: u16, flags: u16, seq: u32, header: Header) -> usize {
    let start = w.begin(family, flags, seq);
    w.raw(&[header.cmd, header.version, 0, 0]);
    start
}

/// The `genlmsghdr` at the start of a message body.
pub fn header(body: &[u8]) -> Option<Header> {
    match body {
        [cmd, version, _, _, ..] => Some(Header {
            cmd: *cmd,
            version: *version,
        }),
        _ => None,
    }
}

/// The attributes of a message body, after its `genlmsghdr`.
pub fn attributes(body: &[u8]) -> &[u8] {
    body.get(HEADER_LEN..).unwrap_or(&[])
}

/// The request that asks the controller for the family called `name`.
pub fn family_request(name: &str, seq: u32) -> Vec<u8> {
    let mut w = Writer::default();
    let header = Header {
        cmd: CTRL_CMD_GETFAMILY,
        version: CTRL_VERSION,
    };
    let m = begin(&mut w, GENL_ID_CTRL, NLM_F_REQUEST | NLM_F_ACK, seq, header);
    w.str(CTRL_ATTR_FAMILY_NAME, name);
    w.end(m);
    w.buf
}

/// A family as the controller describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Family {
    /// The message type its requests carry.
    pub id: u16,
    /// The version the kernel side speaks.
    pub version: u32,
}

/// The family described by a controller answer's body, when it is one (`CTRL_CMD_NEWFAMILY`
/// with an id).
pub fn family(body: &[u8]) -> Option<Family> {
    if header(body)?.cmd != CTRL_CMD_NEWFAMILY {
        return None;
    }
    let a = attributes(body);
    let id = attr::find(a, CTRL_ATTR_FAMILY_ID)?;
    let id = u16::from_ne_bytes(id.get(..2)?.try_into().ok()?);
    let version = attr::find(a, CTRL_ATTR_VERSION)
        .and_then(|v| Some(u32::from_ne_bytes(v.get(..4)?.try_into().ok()?)))
        .unwrap_or(0);
    Some(Family { id, version })
}

/// A family could not be resolved.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Socket(#[from] socket::Error),
    #[error("generic netlink controller reply is malformed")]
    Framing(#[from] FramingError),
    /// No family of that name is registered: its module is not loaded (or not built).
    #[error("the kernel has no generic netlink family {name} (is its module loaded?)")]
    Missing { name: String },
    #[error("the generic netlink controller refused to resolve {name}: {}", std::io::Error::from_raw_os_error(*errno))]
    Refused { name: String, errno: i32 },
    #[error("the generic netlink controller's answer for {name} has no family id")]
    NoAnswer { name: String },
}

/// Asks the controller, over `socket` (a `NETLINK_GENERIC` one), for the family called
/// `name`. Blocking: one request and its answer.
pub fn resolve(socket: &mut Socket, name: &str) -> Result<Family, Error> {
    let seq = socket.take_seq();
    socket.send(&family_request(name, seq), "family request")?;
    let mut answer = Dump::new(seq);
    let mut found = None;
    while !answer.done() {
        message::each(socket.recv("family answer")?, |m| {
            if answer.receive(&m) && found.is_none() {
                found = family(m.body);
            }
        })?;
    }
    match (answer.errno(), found) {
        (Some(ENOENT), _) => Err(Error::Missing {
            name: name.to_owned(),
        }),
        (Some(errno), _) => Err(Error::Refused {
            name: name.to_owned(),
            errno,
        }),
        (None, Some(family)) => Ok(family),
        (None, None) => Err(Error::NoAnswer {
            name: name.to_owned(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::message::messages;

    #[test]
    fn a_family_request_is_a_getfamily_to_the_controller_with_the_name() {
        let bytes = family_request("IPVS", 7);
        #[rustfmt::skip]
        let want: Vec<u8> = [
            // nlmsghdr: length 32 (16 + 4 + 12), type GENL_ID_CTRL, flags REQUEST|ACK, seq 7, port 0
            &32u32.to_ne_bytes()[..], &0x10u16.to_ne_bytes(), &0x0005u16.to_ne_bytes(),
            &7u32.to_ne_bytes(), &[0, 0, 0, 0],
            // genlmsghdr: CTRL_CMD_GETFAMILY (3), version 1, reserved
            &[3, 1, 0, 0],
            // CTRL_ATTR_FAMILY_NAME (2): length 9 (4 + "IPVS\0"), padded to 12
            &9u16.to_ne_bytes(), &2u16.to_ne_bytes(), b"IPVS\0", &[0, 0, 0],
        ]
        .concat();
        assert_eq!(bytes, want);
    }

    #[test]
    fn the_controller_s_answer_gives_the_family_id_and_version() {
        let mut w = Writer::default();
        let header = Header {
            cmd: CTRL_CMD_NEWFAMILY,
            version: 2,
        };
        let m = begin(&mut w, GENL_ID_CTRL, 0, 7, header);
        w.str(CTRL_ATTR_FAMILY_NAME, "IPVS");
        w.bytes(CTRL_ATTR_FAMILY_ID, &0x25u16.to_ne_bytes());
        w.bytes(CTRL_ATTR_VERSION, &1u32.to_ne_bytes());
        w.end(m);
        let m = messages(&w.buf).next().unwrap();
        assert_eq!(header_of(m.body), Some((CTRL_CMD_NEWFAMILY, 2)));
        assert_eq!(
            family(m.body),
            Some(Family {
                id: 0x25,
                version: 1
            })
        );
    }

    fn header_of(body: &[u8]) -> Option<(u8, u8)> {
        header(body).map(|h| (h.cmd, h.version))
    }

    #[test]
    fn short_or_foreign_answers_name_no_family() {
        assert_eq!(header(&[1, 2, 3]), None);
        assert_eq!(family(&[1, 1, 0, 0]), None, "no id attribute");
        assert_eq!(
            family(&[2, 1, 0, 0, 6, 0, 1, 0, 9, 0]),
            None,
            "not NEWFAMILY"
        );
        assert_eq!(
            family(&[1, 1, 0, 0, 5, 0, 1, 0, 9, 0, 0, 0]),
            None,
            "an id of one byte"
        );
        assert_eq!(attributes(&[1, 1]), &[] as &[u8]);
    }
}
