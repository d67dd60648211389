//! The listeners userspace mode would open, as text for `plan`: one line per listener with
//! its endpoints, and the one thing an operator must know about the mode.
//!
//! Pure: [`Listeners`] → text, deterministic (snapshot order).

use std::fmt::Write as _;

use super::plan::{Listeners, Transport};

/// What `plan` prints about userspace mode. Endpoints see the node's address, not the
/// client's: the relay dials them itself (the issue asks `plan` to say so).
pub fn render(listeners: &Listeners) -> String {
    let mut out = String::from(
        "# userspace: the client's address is not preserved; endpoints see this node's address\n",
    );
    for (key, spec) in listeners {
        let (transport, without) = match spec.transport {
            Transport::Tcp => ("TCP", "connections are reset"),
            Transport::Udp => ("UDP", "datagrams are dropped"),
        };
        let _ = write!(out, "{} {transport} ->", super::plan::name(key));
        if spec.endpoints.is_empty() {
            let _ = write!(out, " (no endpoints: {without})");
        }
        for endpoint in &spec.endpoints {
            let _ = write!(out, " {endpoint}");
        }
        if let Some(timeout) = spec.affinity {
            let _ = write!(out, " (ClientIP affinity {}s)", timeout.as_secs());
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::Protocol;
    use crate::dataplane::userspace::plan::plan;
    use crate::testing::snapshots::{node, snapshot, svc};

    #[test]
    fn one_line_per_listener_with_endpoints_and_affinity() {
        let snap = snapshot(
            node(),
            vec![
                svc("default/dns", "10.96.0.10", 53).proto(Protocol::Udp),
                svc("default/web", "10.96.0.11", 80)
                    .node_port(30080)
                    .affinity(600)
                    .ep("10.244.2.5", 8080, "node-b"),
            ],
        );
        assert_eq!(
            render(&plan(&snap)),
            "# userspace: the client's address is not preserved; endpoints see this node's address\n\
             default/dns IPv4 cluster UDP -> (no endpoints: datagrams are dropped)\n\
             default/web IPv4 cluster TCP -> 10.244.2.5:8080 (ClientIP affinity 600s)\n"
        );
    }
}
