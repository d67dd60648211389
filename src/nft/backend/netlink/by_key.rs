//! A large set of our table read back by key, not by dump: the kernel re-walks a hash set from
//! its start for every dump message, so a dump of a large one is quadratic, while asking for
//! the planned keys costs one lookup each. Reading the large sets is most of a restart's
//! adoption at scale.

use std::sync::Arc;

use super::{Error, PROTOCOL, dump, object, request_each, rule, uapi};
use crate::netlink::socket::{self, Socket};
use crate::netlink::writer::Writer;
use crate::nft::ruleset::{Element, Elements, Family, Ruleset, SetDecl, Tuple};

/// Sets planned with at least this many elements are read by key; smaller ones are dumped.
const BY_KEY_MIN: usize = 4096;
/// Keys per by-key request: the list must fit one attribute (64 KiB; a key of four IPv6-sized
/// parts takes 56 bytes), and the kernel's answers, one message per key, the receive buffer.
const KEYS_PER_REQUEST: usize = 1024;

/// The elements of the set in the `GETSET` answer `body`, read by asking for the keys `want`
/// plans for it and compared as they arrive: the planned elements themselves (shared, not
/// copied) when the kernel holds exactly those, a copy with the kernel's where some differ.
/// `None` when this cannot tell the whole content (small or differently declared set, a
/// kernel without element counts, a planned key missing, elements we did not plan, an element
/// we cannot read), and the caller dumps the set instead. With a `helper` socket, half the
/// keys are asked for on it from a second thread: the kernel's work per key (a lookup and an
/// answer of its own) is most of a restart's read at scale, and it runs in the asking thread.
pub(super) fn by_key(
    s: &mut Socket,
    helper: Option<&mut Socket>,
    family: Family,
    body: &[u8],
    want: Option<&Ruleset>,
) -> Result<Option<Arc<Elements>>, Error> {
    let Some((name, decl, Some(count))) = dump::set_summary(family, body) else {
        return Ok(None);
    };
    let Some(planned) = want.and_then(|w| {
        w.sets
            .iter()
            .find(|(n, _)| n.as_str() == name)
            .map(|(_, set)| set)
    }) else {
        return Ok(None);
    };
    // Interval sets are looked up by range; they are small in our layout anyway.
    if planned.decl != decl || decl.interval || planned.elements.len() < BY_KEY_MIN {
        return Ok(None);
    }
    if count as usize != planned.elements.len() {
        return Ok(None);
    }
    let keys: Vec<_> = planned.elements.keys().collect();
    let asked = Asked {
        family,
        name,
        decl: &decl,
        planned: &planned.elements,
    };
    let (first, second) = match helper {
        None => (asked.read(s, &keys)?, Some(KeysRead::default())),
        Some(h) => {
            let (mine, theirs) = keys.split_at(keys.len() / 2);
            std::thread::scope(|scope| {
                let other = std::thread::Builder::new()
                    .name("nft-read".into())
                    .spawn_scoped(scope, || asked.read(h, theirs))
                    .map_err(|source| socket::Error::Io {
                        protocol: PROTOCOL,
                        what: "start of a reading thread",
                        source,
                    })?;
                let first = asked.read(s, mine);
                let second = other
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
                Ok::<_, socket::Error>((first?, second?))
            })?
        }
    };
    let (Some(first), Some(second)) = (first, second) else {
        return Ok(None);
    };
    // Every planned key is there and the kernel holds no more elements than that: nothing
    // unplanned is in the set.
    if first.elements + second.elements != keys.len() {
        return Ok(None);
    }
    if first.differing.is_empty() && second.differing.is_empty() {
        return Ok(Some(Arc::clone(&planned.elements)));
    }
    let mut found = Elements::clone(&planned.elements);
    found.extend(first.differing);
    found.extend(second.differing);
    Ok(Some(Arc::new(found)))
}

/// A by-key read of one set: what is asked for and compared with.
struct Asked<'a> {
    family: Family,
    name: &'a str,
    decl: &'a SetDecl,
    planned: &'a Elements,
}

/// What one socket's share of a by-key read found.
#[derive(Default)]
struct KeysRead {
    /// Elements answered and read.
    elements: usize,
    /// The kernel's elements whose data or comment differ from the planned ones.
    differing: Vec<(Tuple, Element)>,
}

impl Asked<'_> {
    /// Asks for `keys` on `s`, comparing each answer with the plan; `None` when a key is missing
    /// or an answer is not ours to read.
    fn read(&self, s: &mut Socket, keys: &[&Tuple]) -> Result<Option<KeysRead>, socket::Error> {
        let nfproto = rule::Layout {
            family: self.family,
        }
        .nfproto();
        let mut found = KeysRead::default();
        let mut readable = true;
        for chunk in keys.chunks(KEYS_PER_REQUEST) {
            let asked = |w: &mut Writer| {
                w.str(uapi::elem::LIST_TABLE, crate::nft::TABLE);
                w.str(uapi::elem::LIST_SET, self.name);
                let list = w.nest(uapi::elem::LIST_ELEMENTS);
                for key in chunk {
                    object::element(w, key, None);
                }
                w.nest_end(list);
            };
            let ended = request_each(s, uapi::msg::GETSETELEM, nfproto, false, &asked, &mut |b| {
                for element in dump::elements_in(self.family, self.decl, b) {
                    match element.and_then(|(k, e)| Some((self.planned.get(&k)?, k, e))) {
                        Some((p, _, e)) if *p == e => found.elements += 1,
                        Some((_, k, e)) => {
                            found.elements += 1;
                            found.differing.push((k, e));
                        }
                        None => readable = false,
                    }
                }
            })?;
            if ended.errno.is_some() || !readable {
                // A planned key is missing, or the kernel's element is not ours to read: the
                // dump tells what is there instead.
                return Ok(None);
            }
        }
        Ok(Some(found))
    }
}
