//! What `/proc/net/ip_vs_conn` shows may be anything (a truncated line, another program's
//! virtual service, bytes that are not text): reading its persistence templates and cutting a
//! virtual service to them never panics. That the reasons they give are shown cleanly is the
//! renderer's property (`cli/explain`'s tests).

use proptest::prelude::*;

use super::{Planned, persistence};
use crate::dataplane::ipvs::backend::netlink::ServiceKey;
use crate::testing::snapshots::{node, node_policy, snapshot, svc};

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn any_connection_table_is_read_without_panicking(
        conn in prop_oneof![
            any::<String>(),
            "Pro FromIP   FPrt ToIP     TPrt DestIP   DPrt State       Expires PEName PEData\n\
             TCP [0-9A-F]{8} [0-9A-F]{4} 0A60000A 0050 [0-9A-F]{8} [0-9A-F]{4} NONE \\PC{0,20}",
        ],
    ) {
        let snap = snapshot(
            node(),
            vec![svc("default/web", "10.96.0.10", 80).ep("10.244.1.2", 8080, "node-a")],
        );
        let planned = Planned::with_policy(&snap, &node_policy());
        let mut desired = planned.0[0].desired.clone();
        for t in persistence::parse(&conn) {
            let key = ServiceKey::Address {
                protocol: t.protocol.into(),
                address: t.service,
            };
            let _ = persistence::apply(&mut desired, &key, t.client, std::slice::from_ref(&t));
        }
    }
}
