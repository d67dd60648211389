//! What the kernel shows this mode's readers may be anything (another program's rule in one of
//! our chains, a comment with control characters, a truncated `recent` list): reading it never
//! panics, and the rules read walk a packet. That the text it adds to an answer is shown
//! cleanly is the renderer's property (`cli/explain`'s tests).

use proptest::prelude::*;

use super::{Planned, recent, saved};
use crate::dataplane::inspect::Rules as _;
use crate::dataplane::iptables::{adopt, names};
use crate::testing::plans::packet;
use crate::testing::snapshots::{node, node_policy, snapshot, svc};

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn any_saved_rule_or_recent_list_is_read_without_panicking(
        rule in prop_oneof![
            any::<String>(),
            "-d 10\\.96\\.0\\.10/32 -p tcp -m comment --comment \"\\PC{0,300}\" -j KUBE-SVC-[A-Z]{4}",
        ],
        list in any::<String>(),
    ) {
        let snap = snapshot(
            node(),
            vec![svc("default/web", "10.96.0.10", 80).ep("10.244.1.2", 8080, "node-a")],
        );
        let planned = Planned::with_policy(&snap, &node_policy());
        let save = format!(
            "*nat\n:{svc} - [0:0]\n:KUBE-SVC-AAAA - [0:0]\n-A {svc} {rule}\n-A KUBE-SVC-AAAA {rule}\nCOMMIT\n",
            svc = names::SERVICES,
            rule = rule.replace('\n', " "),
        );
        let read = saved::as_read(&adopt::parse(&save), &planned.0[0], None);
        let chains = read.rules.expect("KUBE-SERVICES is there");
        let to = packet(&snap, &node_policy(), "10.96.0.10:80", Some("10.244.1.7"));
        let _ = chains.walk(&to);
        let _ = recent::parse(&list);
        let _ = crate::dataplane::inspect::clock::clock(&list);
    }
}
