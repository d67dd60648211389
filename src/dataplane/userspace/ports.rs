//! Which port each listener gets: a free one from `--proxy-port-range` (upstream's flag for
//! this mode) when set, else one the kernel chooses.
//!
//! Pure: the range is a value and the candidates a function of the ports already ours; the
//! dataplane tries them in order, since another program may hold a port we think free.

use std::collections::BTreeSet;

/// `--proxy-port-range` / `portRange`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PortRange {
    /// Empty: the kernel chooses (an ephemeral port).
    Any,
    /// `low-high`, `base+size` or a single port; both ends included.
    Between { low: u16, high: u16 },
}

impl PortRange {
    /// Reads the forms `config::validate::port_range` accepts; `None` for anything else
    /// (which a validated configuration does not hold).
    pub fn parse(text: &str) -> Option<PortRange> {
        let text = text.trim();
        if text.is_empty() {
            return Some(PortRange::Any);
        }
        let port = |s: &str| s.trim().parse::<u32>().ok();
        let (low, high) = if let Some((a, b)) = text.split_once('-') {
            (port(a)?, port(b)?)
        } else if let Some((a, b)) = text.split_once('+') {
            let base = port(a)?;
            (base, base + port(b)?.checked_sub(1)?)
        } else {
            let p = port(text)?;
            (p, p)
        };
        let low = u16::try_from(low).ok().filter(|&l| l > 0)?;
        let high = u16::try_from(high).ok().filter(|&h| h >= low)?;
        Some(PortRange::Between { low, high })
    }

    /// The ports to try for a new listener, best first: for a range, its ports not in
    /// `taken`, lowest first; otherwise port 0 (the kernel's choice).
    pub fn candidates<'a>(&self, taken: &'a BTreeSet<u16>) -> Box<dyn Iterator<Item = u16> + 'a> {
        match *self {
            PortRange::Any => Box::new(std::iter::once(0)),
            PortRange::Between { low, high } => {
                Box::new((low..=high).filter(move |p| !taken.contains(p)))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_every_form_config_accepts() {
        let between = |low, high| Some(PortRange::Between { low, high });
        assert_eq!(PortRange::parse(""), Some(PortRange::Any));
        assert_eq!(PortRange::parse("30000-30010"), between(30000, 30010));
        assert_eq!(PortRange::parse("300+20"), between(300, 319));
        assert_eq!(PortRange::parse("8080"), between(8080, 8080));
        assert_eq!(PortRange::parse("10-5"), None);
        assert_eq!(PortRange::parse("0-5"), None);
        assert_eq!(PortRange::parse("65535+2"), None);
    }

    #[test]
    fn candidates_skip_ports_already_ours() {
        let range = PortRange::parse("100-104").unwrap();
        let taken = BTreeSet::from([100, 102]);
        let free: Vec<u16> = range.candidates(&taken).collect();
        assert_eq!(free, [101, 103, 104]);
        let any: Vec<u16> = PortRange::Any.candidates(&taken).collect();
        assert_eq!(any, [0]);
    }
}
