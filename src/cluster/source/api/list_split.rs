//! A list response's items, found one by one in its body as the bytes arrive.
//!
//! Why: a list of one kind arrives as one JSON object (`{"kind":…,"metadata":{…},"items":[…]}`),
//! tens of MiB at 250,000 endpoints. Decoding it whole, as kube-rs's `Api::list` does, holds the
//! body twice (its bytes and a copy as text) and every decoded object at once before the first
//! one reaches the tracker. The [`Splitter`] only finds where each element of `items` begins
//! and ends, so each one is decoded by serde_json from one contiguous slice and folded into the
//! model before the next arrives: at any moment the proxy holds a chunk of the body and one
//! object.
//!
//! Why written here: serde_json decodes complete values only (its `StreamDeserializer` reads
//! values one after another, not the elements of an array inside an object), and the streaming
//! JSON readers report every token (struson pulling from a blocking `Read`, actson fed chunk by
//! chunk), after which serde would still have to build each object from tokens. Finding
//! element boundaries needs only the grammar's brackets and strings: this scanner, over
//! chunks, with `memchr` through the strings, then serde_json on each element's bytes.
//!
//! The scanner is strict where a mistake would cost objects: a body that is not one object,
//! has no `items` array, or ends early is an error, never a short list (which the tracker would
//! take as deletions). Within an element it trusts serde_json to find malformed JSON.

use memchr::memchr2;

/// Where a malformed list body stops making sense.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("list response body at byte {at}: {what}")]
pub struct SplitError {
    pub at: u64,
    pub what: &'static str,
}

/// Finds the elements of a list body's `items` array, and keeps its `metadata`, across chunks.
#[derive(Debug, Default)]
pub struct Splitter {
    at: At,
    value: ValueEnd,
    /// The current top-level key, as raw bytes (escapes left as they are: the keys compared
    /// against never have any, and an escaped spelling only means a key is not recognised).
    key: Vec<u8>,
    /// The part of a kept value (an element, `metadata`) that began in an earlier chunk.
    held: Vec<u8>,
    metadata: Option<Vec<u8>>,
    saw_items: bool,
    /// Bytes of the body before the current chunk, for error positions.
    offset: u64,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum At {
    /// Before the body's opening brace.
    #[default]
    Start,
    /// After `{` or `,` of the top-level object: a key (or `}` right after `{`).
    Key,
    /// Inside a top-level key's string; the flag is an escape pending.
    KeyText {
        escaped: bool,
    },
    Colon,
    /// Before a top-level value.
    Value,
    /// Inside a top-level value other than the `items` array.
    InValue {
        keep: bool,
    },
    /// After a top-level value: `,` or `}`.
    Next,
    /// Inside `items`, before an element or `]`.
    Elements,
    /// Inside an element; `begun` is where it began in the current chunk, if it did.
    InElement,
    /// After an element: `,` or `]`.
    AfterElement,
    /// After the top-level object: only whitespace may follow.
    End,
}

impl Splitter {
    /// Reads the next chunk of the body, calling `item` with each element of `items` that ends
    /// in it, whole.
    pub fn feed(&mut self, chunk: &[u8], mut item: impl FnMut(&[u8])) -> Result<(), SplitError> {
        let mut i = 0;
        // Where the current element began, when it began in this chunk.
        let mut begun: Option<usize> = None;
        while i < chunk.len() {
            let b = chunk[i];
            match self.at {
                At::InElement => {
                    let from = begun.unwrap_or(i);
                    match self.value.end(&chunk[i..]) {
                        Some(n) => {
                            let end = i + n;
                            if begun.is_some() && self.held.is_empty() {
                                item(&chunk[from..end]);
                            } else {
                                self.held.extend_from_slice(&chunk[from..end]);
                                item(&self.held);
                                self.held.clear();
                            }
                            begun = None;
                            self.at = At::AfterElement;
                            i = end;
                        }
                        None => {
                            self.held.extend_from_slice(&chunk[from..]);
                            return self.chunk_done(chunk);
                        }
                    }
                    continue;
                }
                At::InValue { keep } => {
                    match self.value.end(&chunk[i..]) {
                        Some(n) => {
                            if keep {
                                self.held.extend_from_slice(&chunk[i..i + n]);
                                self.finish_value()?;
                            }
                            self.at = At::Next;
                            i += n;
                        }
                        None => {
                            if keep {
                                self.held.extend_from_slice(&chunk[i..]);
                            }
                            return self.chunk_done(chunk);
                        }
                    }
                    continue;
                }
                At::KeyText { escaped } => {
                    if escaped {
                        self.key.push(b);
                        self.at = At::KeyText { escaped: false };
                        i += 1;
                        continue;
                    }
                    match memchr2(b'"', b'\\', &chunk[i..]) {
                        Some(n) => {
                            self.key.extend_from_slice(&chunk[i..i + n]);
                            self.at = if chunk[i + n] == b'"' {
                                At::Colon
                            } else {
                                self.key.push(b'\\');
                                At::KeyText { escaped: true }
                            };
                            i += n + 1;
                        }
                        None => {
                            self.key.extend_from_slice(&chunk[i..]);
                            return self.chunk_done(chunk);
                        }
                    }
                    continue;
                }
                _ => {}
            }
            if b.is_ascii_whitespace() {
                i += 1;
                continue;
            }
            self.at = match (self.at, b) {
                (At::Start, b'{') => At::Key,
                (At::Key, b'"') => {
                    self.key.clear();
                    At::KeyText { escaped: false }
                }
                (At::Key, b'}') => At::End,
                (At::Colon, b':') => At::Value,
                (At::Value, b'[') if self.key == b"items" => {
                    self.saw_items = true;
                    At::Elements
                }
                (At::Value, _) => {
                    self.value = ValueEnd::default();
                    // Kept: `metadata`, and `items` when it is not an array (`null` is an
                    // empty list; anything else is an error once it is read whole).
                    let keep = self.key == b"metadata" || self.key == b"items";
                    self.at = At::InValue { keep };
                    continue;
                }
                (At::Next, b',') => At::Key,
                (At::Next, b'}') => At::End,
                (At::Elements, b']') => At::Next,
                (At::Elements, _) => {
                    self.value = ValueEnd::default();
                    begun = Some(i);
                    self.at = At::InElement;
                    continue;
                }
                (At::AfterElement, b',') => At::Elements,
                (At::AfterElement, b']') => At::Next,
                (at, _) => return Err(self.error(i, expected(at))),
            };
            i += 1;
        }
        self.chunk_done(chunk)
    }

    /// The end of the body: the list's `metadata` as JSON (`None` when it had none), or why the
    /// body was not a whole list.
    pub fn finish(self) -> Result<Option<Vec<u8>>, SplitError> {
        if self.at != At::End {
            return Err(self.error(0, "the body ends inside the list"));
        }
        if !self.saw_items {
            return Err(self.error(0, "the list has no items array"));
        }
        Ok(self.metadata)
    }

    fn finish_value(&mut self) -> Result<(), SplitError> {
        let value = std::mem::take(&mut self.held);
        if self.key == b"metadata" {
            self.metadata = Some(value);
        } else if value == b"null" {
            self.saw_items = true;
        } else {
            return Err(self.error(0, "items is neither an array nor null"));
        }
        Ok(())
    }

    fn chunk_done(&mut self, chunk: &[u8]) -> Result<(), SplitError> {
        self.offset += chunk.len() as u64;
        Ok(())
    }

    fn error(&self, i: usize, what: &'static str) -> SplitError {
        SplitError {
            at: self.offset + i as u64,
            what,
        }
    }
}

fn expected(at: At) -> &'static str {
    match at {
        At::Start => "expected the list object's opening brace",
        At::Key => "expected a key",
        At::Colon => "expected a colon after a key",
        At::Next => "expected a comma or the list object's closing brace",
        At::Elements => "expected an item or the end of items",
        At::AfterElement => "expected a comma or the end of items",
        At::End => "unexpected bytes after the list object",
        At::KeyText { .. } | At::Value | At::InValue { .. } | At::InElement => "malformed JSON",
    }
}

/// Where one JSON value ends, across chunks: strings (with escapes) and bracket depth for
/// objects and arrays; a bare scalar ends at the next delimiter.
#[derive(Debug, Default)]
struct ValueEnd {
    started: bool,
    scalar: bool,
    depth: u32,
    in_string: bool,
    escaped: bool,
}

impl ValueEnd {
    /// How many bytes of `bytes` the value still takes, if it ends in them; continues where the
    /// previous call stopped.
    fn end(&mut self, bytes: &[u8]) -> Option<usize> {
        let mut i = 0;
        while i < bytes.len() {
            if self.in_string {
                if self.escaped {
                    self.escaped = false;
                    i += 1;
                    continue;
                }
                let n = memchr2(b'"', b'\\', &bytes[i..])?;
                i += n;
                if bytes[i] == b'\\' {
                    self.escaped = true;
                } else {
                    self.in_string = false;
                    if self.depth == 0 {
                        return Some(i + 1);
                    }
                }
                i += 1;
                continue;
            }
            let b = bytes[i];
            if !self.started {
                self.started = true;
                match b {
                    b'"' => self.in_string = true,
                    b'{' | b'[' => self.depth = 1,
                    _ => self.scalar = true,
                }
                i += 1;
                continue;
            }
            if self.scalar {
                if matches!(b, b',' | b'}' | b']') || b.is_ascii_whitespace() {
                    return Some(i);
                }
                i += 1;
                continue;
            }
            match b {
                b'"' => self.in_string = true,
                b'{' | b'[' => self.depth += 1,
                b'}' | b']' => {
                    self.depth -= 1;
                    if self.depth == 0 {
                        return Some(i + 1);
                    }
                }
                _ => {}
            }
            i += 1;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::{Value, json};

    use super::*;

    /// Splits `body` at `cuts` and returns the items (as JSON values) and the metadata.
    fn split(body: &[u8], cuts: &[usize]) -> Result<(Vec<Value>, Option<Value>), SplitError> {
        let mut splitter = Splitter::default();
        let mut items = Vec::new();
        let mut start = 0;
        let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (body.len() + 1)).collect();
        cuts.sort_unstable();
        cuts.push(body.len());
        for cut in cuts {
            splitter.feed(&body[start..cut], |item| {
                items.push(serde_json::from_slice(item).expect("an item is whole JSON"));
            })?;
            start = cut;
        }
        let metadata = splitter.finish()?;
        Ok((
            items,
            metadata.map(|m| serde_json::from_slice(&m).expect("metadata is whole JSON")),
        ))
    }

    #[test]
    fn items_and_metadata_of_an_api_server_list() {
        let body = br#"{"kind":"ServiceList","apiVersion":"v1","metadata":{"resourceVersion":"42"},"items":[{"metadata":{"name":"a"}},{"metadata":{"name":"b\"}]"}}]}"#;
        let (items, metadata) = split(body, &[]).unwrap();
        assert_eq!(
            items,
            vec![
                json!({"metadata": {"name": "a"}}),
                json!({"metadata": {"name": "b\"}]"}})
            ]
        );
        assert_eq!(metadata, Some(json!({"resourceVersion": "42"})));
    }

    #[test]
    fn null_or_empty_items_are_an_empty_list() {
        for body in [
            &br#"{"metadata":{},"items":null}"#[..],
            br#"{"items":[ ],"metadata":{}}"#,
        ] {
            assert_eq!(split(body, &[7]).unwrap().0, Vec::<Value>::new());
        }
    }

    #[test]
    fn a_body_that_is_not_a_whole_list_is_an_error_never_a_short_list() {
        let cases: [&[u8]; 7] = [
            br#"{"metadata":{},"items":[{"a":1},"#,
            br#"{"metadata":{}}"#,
            br#"{"metadata":{},"items":5}"#,
            br#"[{"a":1}]"#,
            br#"{"items":[{"a":1}]} x"#,
            br#"{"items":[{"a":1}}"#,
            b"",
        ];
        for body in cases {
            assert!(
                split(body, &[3]).is_err(),
                "{}",
                String::from_utf8_lossy(body)
            );
        }
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            // Strings full of what the scanner must not mistake for structure.
            "[\"\\\\{}\\[\\],:a é\u{1F600}\n\t]{0,12}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 32, 5, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                prop::collection::btree_map("[a-z\"\\\\{]{0,6}", inner, 0..5)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        /// However the body is cut into chunks, and however it is spaced, the items and the
        /// metadata are those serde_json reads from the whole body.
        #[test]
        fn items_are_those_of_the_whole_body_however_it_is_cut(
            items in prop::collection::vec(json_value(), 0..6),
            metadata in json_value(),
            extra in json_value(),
            pretty in any::<bool>(),
            cuts in prop::collection::vec(any::<usize>(), 0..8),
        ) {
            let list = json!({"apiVersion": "v1", "extra": extra, "metadata": metadata, "items": items});
            let body = if pretty {
                serde_json::to_vec_pretty(&list).unwrap()
            } else {
                serde_json::to_vec(&list).unwrap()
            };
            let (got, got_metadata) = split(&body, &cuts).unwrap();
            prop_assert_eq!(got, items);
            prop_assert_eq!(got_metadata, Some(metadata));
        }

        /// A body cut short anywhere is an error.
        #[test]
        fn a_body_cut_short_is_an_error(
            items in prop::collection::vec(json_value(), 1..4),
            keep in any::<usize>(),
        ) {
            let body = serde_json::to_vec(&json!({"metadata": {}, "items": items})).unwrap();
            let keep = keep % body.len();
            prop_assert!(split(&body[..keep], &[]).is_err());
        }
    }
}
