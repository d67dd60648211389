//! Backends wrapping the real one, for the applier's tests: one that makes the kernel refuse
//! a transaction on demand, one that records what each read of the kernel expected.

use kube_proxy_rs::dataplane::nftables::Drift;
use kube_proxy_rs::nft::Name;
use kube_proxy_rs::nft::adopt::Parsed;
use kube_proxy_rs::nft::backend::{self, Backend};
use kube_proxy_rs::nft::ruleset::{Rule, Statement, Verdict};
use kube_proxy_rs::nft::{Family, Op, Ruleset, Transaction};

/// A real backend, made to send a transaction the kernel refuses when asked: a rule into a
/// chain that does not exist, appended to the real transaction.
pub struct Refusing {
    pub inner: Box<dyn Backend>,
    pub refuse_next: bool,
}

impl Backend for Refusing {
    fn run(&mut self, transactions: &[Transaction]) -> Result<(), backend::Error> {
        if std::mem::take(&mut self.refuse_next) {
            let mut broken = transactions.to_vec();
            broken[0].ops.push(Op::AddRule {
                chain: Name::parse("no-such-chain").expect("a valid name"),
                rule: Rule::new(vec![], vec![Statement::Verdict(Verdict::Accept)]),
            });
            return self.inner.run(&broken);
        }
        self.inner.run(transactions)
    }

    fn dump(&mut self, family: Family) -> Result<Option<Parsed>, backend::Error> {
        self.inner.dump(family)
    }

    fn dump_expecting(
        &mut self,
        family: Family,
        want: &Ruleset,
    ) -> Result<Option<Parsed>, backend::Error> {
        self.inner.dump_expecting(family, want)
    }

    fn watched_by(&mut self, drift: std::sync::Arc<Drift>) {
        self.inner.watched_by(drift)
    }
}

/// A real backend that records what each read of the kernel expected to find.
pub struct RecordingReads {
    pub inner: Box<dyn Backend>,
    pub expected: Vec<Ruleset>,
}

impl Backend for RecordingReads {
    fn run(&mut self, transactions: &[Transaction]) -> Result<(), backend::Error> {
        self.inner.run(transactions)
    }

    fn dump(&mut self, family: Family) -> Result<Option<Parsed>, backend::Error> {
        self.inner.dump(family)
    }

    fn dump_expecting(
        &mut self,
        family: Family,
        want: &Ruleset,
    ) -> Result<Option<Parsed>, backend::Error> {
        self.expected.push(want.clone());
        self.inner.dump_expecting(family, want)
    }

    fn watched_by(&mut self, drift: std::sync::Arc<Drift>) {
        self.inner.watched_by(drift)
    }
}
