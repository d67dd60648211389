//! The name of an nf_tables chain, set or map, made safe once.
//!
//! Pure. Every name the library sends or reads is a [`Name`]: it can only hold `[a-z0-9-]`, so
//! a name can never close a quote or start a new statement in rendered text, and a name read
//! back that we could not have made is told apart (the object is foreign).

use std::fmt;
use std::sync::Arc;

/// A chain, set or map name. Holds only `[a-z0-9-]`, at most [`Name::MAX`] bytes, so it needs
/// no quoting and cannot change the meaning of the text around it. Fixed names cost no
/// allocation (the planner names a set for every element it adds).
#[derive(Clone)]
pub struct Name(Repr);

#[derive(Clone)]
enum Repr {
    Static(&'static str),
    Owned(Arc<str>),
}

impl Name {
    /// nft's limit is 256 bytes; ours are far shorter.
    pub const MAX: usize = 64;

    /// A name from a constant of a mode's `names.rs`.
    pub fn fixed(name: &'static str) -> Name {
        debug_assert!(Name::is_valid(name), "bad fixed name {name}");
        Name(Repr::Static(name))
    }

    /// A name a mode's `names.rs` makes from parts it controls (a prefix, a count, a hash).
    pub fn derived(name: String) -> Name {
        debug_assert!(Name::is_valid(&name), "bad derived name {name}");
        Name(Repr::Owned(name.into()))
    }

    /// A name read back from the kernel; `None` when it is not one we could have made.
    pub fn parse(name: &str) -> Option<Name> {
        Name::is_valid(name).then(|| Name(Repr::Owned(name.into())))
    }

    fn is_valid(name: &str) -> bool {
        !name.is_empty()
            && name.len() <= Name::MAX
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    }

    pub fn as_str(&self) -> &str {
        match &self.0 {
            Repr::Static(s) => s,
            Repr::Owned(s) => s,
        }
    }
}

impl PartialEq for Name {
    fn eq(&self, other: &Name) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for Name {}

impl PartialOrd for Name {
    fn partial_cmp(&self, other: &Name) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Name {
    fn cmp(&self, other: &Name) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl std::hash::Hash for Name {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_refuses_what_we_never_make() {
        for bad in ["", "Services", "a b", "x\"", "a;b", &"a".repeat(65)] {
            assert!(Name::parse(bad).is_none(), "{bad:?}");
        }
    }
}
