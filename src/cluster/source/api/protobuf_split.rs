//! A protobuf list response's items, found one by one in its body as the bytes arrive: the
//! counterpart of [`list_split`](super::list_split) for `application/vnd.kubernetes.protobuf`.
//!
//! Why protobuf for lists: the API server encodes a large list of Services or EndpointSlices as
//! protobuf in far fewer bytes and less time than as JSON (measured with curl against the test
//! API server: docs/benchmarks-history.md, "Protobuf lists"). Upstream's clients speak protobuf
//! for the same reason (`clientConnection.contentType`'s default).
//!
//! The body is the API server's envelope: the four bytes `k8s\0`, then a `runtime.Unknown`
//! message (field 1 its type, field 2 `raw`: the list message, fields 3 and 4 its encoding and
//! content type) whose `raw` is the list (field 1 its `ListMeta`, then field 2 once per item).
//! Every field is a tag and a length, so the [`Splitter`] reads tags and lengths only, holds an
//! item's bytes until the item is whole, and hands it on; the objects are decoded by prost
//! (k8s-pb's types) from that one slice. At any moment it holds a chunk and one item.
//!
//! Why written here: prost decodes whole messages from a buffer; the list is one message of
//! tens of MiB. Reading the envelope's tags and lengths is the small part of the wire format
//! this needs, and `prost::encoding`'s varint reader works on complete buffers only.
//!
//! Strict, as the JSON splitter: a body that is not this envelope, whose lengths do not add
//! up, or that ends early is an error, never a short list.

/// Where a malformed protobuf list body stops making sense.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("protobuf list response body at byte {at}: {what}")]
pub struct SplitError {
    pub at: u64,
    pub what: &'static str,
}

/// The envelope's first bytes.
pub const MAGIC: &[u8; 4] = b"k8s\0";

/// Protobuf's wire type of a length-delimited field (messages, bytes, strings).
const LEN: u8 = 2;

/// Finds the items of a protobuf list body, and keeps its `ListMeta`, across chunks.
#[derive(Debug, Default)]
pub struct Splitter {
    at: At,
    /// Bytes of an unfinished field header or item carried over from earlier chunks.
    held: Vec<u8>,
    metadata: Option<Vec<u8>>,
    saw_list: bool,
    /// Body bytes consumed before `held`'s first byte, for error positions.
    offset: u64,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum At {
    /// Before the four bytes of [`MAGIC`].
    #[default]
    Magic,
    /// Between fields of the `runtime.Unknown` envelope.
    Envelope,
    /// Between fields of the list message, `left` (> 0) bytes of it still to come.
    List { left: u64 },
    /// Inside a field not kept: `left` bytes of it to pass over, then `then`.
    Skip { left: u64, then: Level },
}

/// Which message a skipped field belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Level {
    Envelope,
    /// The list message, with this many bytes of it left after the skipped field.
    List {
        left: u64,
    },
}

/// What one step over the bytes at hand did.
enum Step {
    /// Consumed this many bytes.
    Ate(usize),
    /// The next field is not whole yet: wait for more bytes.
    More,
}

impl Splitter {
    /// Reads the next chunk of the body, calling `item` with each list item that ends in it,
    /// whole.
    pub fn feed(&mut self, chunk: &[u8], mut item: impl FnMut(&[u8])) -> Result<(), SplitError> {
        if self.held.is_empty() {
            let used = self.eat(chunk, &mut item)?;
            self.offset += used as u64;
            self.held.extend_from_slice(&chunk[used..]);
        } else {
            let mut held = std::mem::take(&mut self.held);
            held.extend_from_slice(chunk);
            let used = self.eat(&held, &mut item)?;
            self.offset += used as u64;
            held.drain(..used);
            self.held = held;
        }
        Ok(())
    }

    /// The end of the body: the list's `ListMeta` bytes (`None` when it had none), or an error
    /// when the body was not a whole list.
    pub fn finish(self) -> Result<Option<Vec<u8>>, SplitError> {
        let at = self.offset + self.held.len() as u64;
        let error = |what| Err(SplitError { at, what });
        if !self.held.is_empty() || self.at != At::Envelope {
            return error("the body ends inside a field");
        }
        if !self.saw_list {
            return error("the envelope has no list in it");
        }
        Ok(self.metadata)
    }

    /// Steps over `bytes` as far as whole fields go; how many bytes were consumed.
    fn eat(&mut self, bytes: &[u8], item: &mut impl FnMut(&[u8])) -> Result<usize, SplitError> {
        let mut at = 0;
        while at < bytes.len() {
            match self.step(&bytes[at..], item).map_err(|what| SplitError {
                at: self.offset + at as u64,
                what,
            })? {
                Step::Ate(n) => at += n,
                Step::More => break,
            }
        }
        Ok(at)
    }

    fn step(&mut self, bytes: &[u8], item: &mut impl FnMut(&[u8])) -> Result<Step, &'static str> {
        match self.at {
            At::Magic => {
                let Some(head) = bytes.get(..MAGIC.len()) else {
                    return match MAGIC.starts_with(bytes) {
                        true => Ok(Step::More),
                        false => Err("not a Kubernetes protobuf body"),
                    };
                };
                if head != MAGIC {
                    return Err("not a Kubernetes protobuf body");
                }
                self.at = At::Envelope;
                Ok(Step::Ate(MAGIC.len()))
            }
            At::Envelope => {
                let Some(h) = field_header(bytes)? else {
                    return Ok(Step::More);
                };
                match (h.number, h.len) {
                    (2, Some(len)) => {
                        if self.saw_list {
                            return Err("the envelope has two lists");
                        }
                        self.saw_list = true;
                        self.at = in_list(len);
                    }
                    // A content encoding (field 3) would mean `raw` is compressed; the API
                    // server never sends one, and reading it as a list would be wrong.
                    (3, Some(len)) if len > 0 => return Err("the list has a content encoding"),
                    (_, Some(len)) => self.at = skip(len, Level::Envelope),
                    (_, None) => {}
                }
                Ok(Step::Ate(h.size))
            }
            At::List { left } => {
                let Some(h) = field_header(bytes)? else {
                    return match bytes.len() as u64 >= left {
                        true => Err("a field runs past the end of the list"),
                        false => Ok(Step::More),
                    };
                };
                // What is left of the list after this field, header and value.
                let after = left
                    .checked_sub(h.size as u64)
                    .and_then(|l| l.checked_sub(h.len.unwrap_or(0)))
                    .ok_or("a field runs past the end of the list")?;
                match (h.number, h.len) {
                    (1 | 2, Some(len)) => {
                        let end = h.size + usize::try_from(len).map_err(|_| "a field too large")?;
                        let Some(value) = bytes.get(h.size..end) else {
                            return Ok(Step::More);
                        };
                        if h.number == 1 {
                            self.metadata = Some(value.to_vec());
                        } else {
                            item(value);
                        }
                        self.at = in_list(after);
                        Ok(Step::Ate(end))
                    }
                    (1 | 2, None) => Err("a list field that is not length-delimited"),
                    (_, Some(len)) => {
                        self.at = skip(len, Level::List { left: after });
                        Ok(Step::Ate(h.size))
                    }
                    (_, None) => {
                        self.at = in_list(after);
                        Ok(Step::Ate(h.size))
                    }
                }
            }
            At::Skip { left, then } => {
                let n = left.min(bytes.len() as u64);
                self.at = skip(left - n, then);
                Ok(Step::Ate(n as usize))
            }
        }
    }
}

/// Passing over `left` more bytes, then reading fields of `then`.
fn skip(left: u64, then: Level) -> At {
    match (left, then) {
        (0, Level::Envelope) => At::Envelope,
        (0, Level::List { left }) => in_list(left),
        (left, then) => At::Skip { left, then },
    }
}

/// Reading fields of the list with `left` bytes of it to come; the envelope's once it is read.
fn in_list(left: u64) -> At {
    match left {
        0 => At::Envelope,
        left => At::List { left },
    }
}

/// The start of a field.
pub(super) struct FieldHeader {
    pub number: u64,
    /// The value's length when it is length-delimited; `None` for a scalar, whose value is
    /// counted in [`size`](Self::size) here.
    pub len: Option<u64>,
    /// Bytes of the header (and of a scalar's value).
    pub size: usize,
}

/// The header of the field `bytes` begin with; `None` when it is not whole yet.
pub(super) fn field_header(bytes: &[u8]) -> Result<Option<FieldHeader>, &'static str> {
    let Some((key, mut at)) = varint(bytes)? else {
        return Ok(None);
    };
    let (field, wire) = (key >> 3, (key & 7) as u8);
    if field == 0 {
        return Err("a field numbered 0");
    }
    let size = match wire {
        0 => match varint(&bytes[at..])? {
            Some((_, n)) => {
                at += n;
                None
            }
            None => return Ok(None),
        },
        1 | 5 => {
            let n = if wire == 1 { 8 } else { 4 };
            if bytes.len() < at + n {
                return Ok(None);
            }
            at += n;
            None
        }
        LEN => match varint(&bytes[at..])? {
            Some((len, n)) => {
                at += n;
                Some(len)
            }
            None => return Ok(None),
        },
        _ => return Err("a field of an unknown or group wire type"),
    };
    Ok(Some(FieldHeader {
        number: field,
        len: size,
        size: at,
    }))
}

/// A varint and its size; `None` when it is not whole yet.
fn varint(bytes: &[u8]) -> Result<Option<(u64, usize)>, &'static str> {
    let mut value = 0u64;
    for (i, &b) in bytes.iter().enumerate() {
        if i == 10 || (i == 9 && b > 1) {
            return Err("a varint longer than 64 bits");
        }
        value |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Ok(Some((value, i + 1)));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn put_varint(out: &mut Vec<u8>, mut v: u64) {
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }

    fn put_field(out: &mut Vec<u8>, field: u64, value: &[u8]) {
        put_varint(out, field << 3 | u64::from(LEN));
        put_varint(out, value.len() as u64);
        out.extend_from_slice(value);
    }

    /// An envelope as the API server writes it: type meta, the list, empty encoding and type;
    /// the list with its metadata, the items, and an unknown scalar and field in between.
    fn body(metadata: &[u8], items: &[Vec<u8>], extra: bool) -> Vec<u8> {
        let mut list = Vec::new();
        put_field(&mut list, 1, metadata);
        for (i, item) in items.iter().enumerate() {
            put_field(&mut list, 2, item);
            if extra && i == 0 {
                put_varint(&mut list, 7 << 3);
                put_varint(&mut list, 300);
                put_field(&mut list, 9, b"not an item");
            }
        }
        let mut out = MAGIC.to_vec();
        put_field(&mut out, 1, b"\x0a\x02v1\x12\x0bServiceList");
        put_field(&mut out, 2, &list);
        put_field(&mut out, 3, b"");
        put_field(&mut out, 4, b"");
        out
    }

    /// The items and the metadata of a body.
    type Split = (Vec<Vec<u8>>, Option<Vec<u8>>);

    fn split(body: &[u8], cuts: &[usize]) -> Result<Split, SplitError> {
        let mut splitter = Splitter::default();
        let mut items = Vec::new();
        let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (body.len() + 1)).collect();
        cuts.sort_unstable();
        cuts.push(body.len());
        let mut start = 0;
        for cut in cuts {
            splitter.feed(&body[start..cut], |item| items.push(item.to_vec()))?;
            start = cut;
        }
        Ok((items, splitter.finish()?))
    }

    #[test]
    fn items_and_metadata_of_a_list() {
        let items = vec![b"a".to_vec(), vec![], vec![0x80; 200]];
        let (got, metadata) = split(&body(b"\x12\x0242", &items, true), &[1, 5, 9]).unwrap();
        assert_eq!(got, items);
        assert_eq!(metadata.as_deref(), Some(&b"\x12\x0242"[..]));
    }

    #[test]
    fn a_body_that_is_not_a_whole_list_is_an_error_never_a_short_list() {
        let whole = body(b"", &[b"abc".to_vec()], false);
        let mut no_list = MAGIC.to_vec();
        put_field(&mut no_list, 1, b"");
        let mut encoded = body(b"", &[], false);
        encoded.truncate(encoded.len() - 4);
        put_field(&mut encoded, 3, b"gzip");
        let mut overlong = MAGIC.to_vec();
        let mut list = Vec::new();
        put_field(&mut list, 2, b"abcdef");
        put_varint(&mut overlong, 2 << 3 | u64::from(LEN));
        put_varint(&mut overlong, 4);
        overlong.extend_from_slice(&list);
        let cases: [&[u8]; 6] = [
            b"",
            b"{\"items\":[]}",
            &no_list,
            &encoded,
            &overlong,
            &whole[..whole.len() - 1],
        ];
        for case in cases {
            assert!(split(case, &[2]).is_err(), "{case:?}");
        }
    }

    proptest! {
        /// However the body is cut into chunks, the items and metadata are those written.
        #[test]
        fn items_are_those_written_however_the_body_is_cut(
            items in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..300), 0..6),
            metadata in prop::collection::vec(any::<u8>(), 0..20),
            extra in any::<bool>(),
            cuts in prop::collection::vec(any::<usize>(), 0..8),
        ) {
            let (got, got_metadata) = split(&body(&metadata, &items, extra), &cuts).unwrap();
            prop_assert_eq!(got, items);
            prop_assert_eq!(got_metadata, Some(metadata));
        }

        /// A body cut short anywhere is an error.
        #[test]
        fn a_body_cut_short_is_an_error(
            items in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..40), 1..4),
            keep in any::<usize>(),
            cuts in prop::collection::vec(any::<usize>(), 0..4),
        ) {
            let body = body(b"", &items, false);
            // The last two fields (empty encoding and type) are two bytes each.
            let keep = keep % (body.len() - 4);
            prop_assert!(split(&body[..keep], &cuts).is_err());
        }
    }
}
