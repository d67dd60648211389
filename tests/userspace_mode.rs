//! Userspace mode's dataplane with real sockets (root): in a fresh network namespace whose
//! `lo` carries two "pod" addresses, snapshots loaded from manifests are synced, and traffic
//! sent to the listeners it opens reaches the pods; endpoint changes and Service removal are
//! synced in turn, with clients connecting to the listeners directly (the redirect rules to
//! them are `userspace_redirect.rs`'s).

use support::relay_pods;
use support::userspace_dataplane;

use std::net::SocketAddr;
use std::time::Duration;

use kube_proxy_rs::cluster::{Changes, Protocol};
use kube_proxy_rs::dataplane::Dataplane as _;
use kube_proxy_rs::dataplane::userspace::UserspaceDataplane;
use kube_proxy_rs::dataplane::userspace::plan::List;
use kube_proxy_rs::dataplane::userspace::ports::PortRange;
use kube_proxy_rs::dataplane::userspace::relay::Settings;
use kube_proxy_rs::metrics::registry::Metrics;
use relay_pods::{addr, in_netns, pod, udp_pod};
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpStream, UdpSocket};
use tokio::time::timeout;
use userspace_dataplane::{STEP, greeting, listener_of, manifests, operations, snapshot};

#[test]
fn syncs_open_update_and_close_listeners_that_relay_to_the_selected_endpoints() {
    let dir = tempfile::tempdir().unwrap();
    in_netns(
        |ns| {
            for ip in ["10.244.1.2/32", "10.244.1.3/32"] {
                ns.output("ip", &["addr", "add", ip, "dev", "lo"]);
            }
        },
        || async {
            pod("10.244.1.2:8080", "a").await;
            pod("10.244.1.3:8080", "b").await;
            udp_pod("10.244.1.2:5353", "a").await;
            let range = PortRange::parse("30100-30120").unwrap();
            let local = "127.0.0.1".parse().unwrap();
            let mut dp = UserspaceDataplane::new(Settings::default(), range, local);
            let none = Changes::default();

            let both = snapshot(dir.path(), &manifests(&["10.244.1.2", "10.244.1.3"], true));
            let report = dp.sync(&both, &none, true).expect("first sync");
            assert_eq!(operations(&report), 2, "two listeners opened");
            let web = listener_of(&dp, "web").expect("a web listener");
            assert_eq!(web, addr("127.0.0.1:30100"), "the range's first port");
            let dns = listener_of(&dp, "dns").expect("a dns listener");
            assert_eq!(
                dns,
                addr("127.0.0.1:30100"),
                "UDP ports are their own space"
            );
            assert_eq!(
                *dp.relay_ports().now(),
                [(Protocol::Tcp, web.port()), (Protocol::Udp, dns.port())].into(),
                "the conntrack reconciler sees the open listeners' ports"
            );

            let (mut to_a, first) = greeting(web).await;
            let (mut to_b, second) = greeting(web).await;
            assert_eq!((first.as_str(), second.as_str()), ("a", "b"));
            let client = UdpSocket::bind("127.0.0.1:0").await.unwrap();
            client.send_to(b"hi", dns).await.unwrap();
            let mut buf = [0u8; 64];
            let (n, from) = timeout(STEP, client.recv_from(&mut buf))
                .await
                .expect("a udp reply in time")
                .unwrap();
            assert_eq!((&buf[..n], from), (&b"a:hi"[..], dns));

            // What a scrape shows of it: both web connections open, the dns flow, bytes.
            let metrics = Metrics::new();
            metrics.set_relay_source(std::sync::Arc::new(dp.listener_counters()));
            let text = metrics.encode();
            let web_series = r#"ip_family="IPv4",namespace="default",service="web",port="http",protocol="TCP",listener="cluster""#;
            let dns_series = r#"ip_family="IPv4",namespace="default",service="dns",port="dns",protocol="UDP",listener="cluster""#;
            for line in [
                format!("kubeproxy_rs_userspace_connections{{{web_series}}} 2\n"),
                format!("kubeproxy_rs_userspace_connections_total{{{web_series}}} 2\n"),
                format!("kubeproxy_rs_userspace_connections_total{{{dns_series}}} 1\n"),
                format!("kubeproxy_rs_userspace_bytes_total{{{dns_series},direction=\"in\"}} 2\n"),
                format!("kubeproxy_rs_userspace_bytes_total{{{dns_series},direction=\"out\"}} 4\n"),
                format!(
                    "kubeproxy_rs_userspace_refused_total{{{web_series},reason=\"no-endpoint\"}} 0\n"
                ),
            ] {
                assert!(text.contains(&line), "missing {line:?} in\n{text}");
            }

            let only_b = snapshot(dir.path(), &manifests(&["10.244.1.3"], true));
            let report = dp.sync(&only_b, &none, false).expect("endpoint sync");
            assert_eq!(operations(&report), 1, "one listener updated in place");
            assert_eq!(listener_of(&dp, "web"), Some(web), "same port");
            let mut rest = Vec::new();
            let closed = timeout(STEP, to_a.read_to_end(&mut rest)).await;
            assert!(
                closed.is_ok(),
                "the connection to the removed endpoint closes"
            );
            assert_eq!(greeting(web).await.1, "b");
            to_b.write_all(b"still\n").await.unwrap();
            let mut echo = String::new();
            timeout(STEP, to_b.read_line(&mut echo))
                .await
                .unwrap()
                .unwrap();
            assert_eq!(
                echo, "still\n",
                "the connection to the kept endpoint goes on"
            );
            let again = dp.sync(&only_b, &none, true).expect("unchanged sync");
            assert_eq!(operations(&again), 0, "nothing to do");

            let without_web = snapshot(dir.path(), &manifests(&[], false));
            let report = dp.sync(&without_web, &none, false).expect("removal sync");
            assert_eq!(operations(&report), 1, "one listener closed");
            assert_eq!(listener_of(&dp, "web"), None);
            // Refused from the moment the sync returns, not from the relay's next turn.
            let refused = timeout(STEP, TcpStream::connect(web))
                .await
                .expect("a refusal, not a hang");
            assert_eq!(
                refused.map(|_| ()).unwrap_err().kind(),
                std::io::ErrorKind::ConnectionRefused,
                "nothing listens on {web} any more"
            );
        },
    );
}

#[test]
fn a_port_held_by_another_program_is_skipped_and_a_full_range_fails_the_sync() {
    let dir = tempfile::tempdir().unwrap();
    in_netns(
        |ns| {
            ns.output("ip", &["addr", "add", "10.244.1.2/32", "dev", "lo"]);
        },
        || async {
            pod("10.244.1.2:8080", "a").await;
            let other = std::net::TcpListener::bind("127.0.0.1:30200").unwrap();
            let range = PortRange::parse("30200-30201").unwrap();
            let local = "127.0.0.1".parse().unwrap();
            let mut dp = UserspaceDataplane::new(Settings::default(), range, local);
            let none = Changes::default();
            let web = snapshot(dir.path(), &manifests(&["10.244.1.2"], true));
            dp.sync(&web, &none, true).expect("sync");
            let at = listener_of(&dp, "web").expect("a web listener");
            assert_eq!(at, addr("127.0.0.1:30201"), "the port after the taken one");
            assert_eq!(greeting(at).await.1, "a");

            // A NodePort under `externalTrafficPolicy: Local`: a listener over this node's
            // endpoints beside the cluster-wide one.
            let nodeport = manifests(&["10.244.1.2"], true)
                .replace(
                    "  clusterIP: 10.96.0.10\n",
                    "  type: NodePort\n  externalTrafficPolicy: Local\n  clusterIP: 10.96.0.10\n",
                )
                .replace("targetPort: 8080}", "targetPort: 8080, nodePort: 30080}");
            let wants_two = snapshot(dir.path(), &nodeport);
            let error = dp.sync(&wants_two, &none, false).expect_err("no port left");
            let error = kube_proxy_rs::causes::one_line(&error);
            assert!(error.contains("local"), "{error}");
            assert_eq!(
                listener_of(&dp, "web"),
                Some(at),
                "what was open stays open"
            );

            drop(other);
            // Retried as the runner retries a failed sync. The port may stay held for a
            // moment after the drop: a process another test spawns at that instant holds a
            // copy of every descriptor between its fork and its exec.
            let mut retried = dp.sync(&wants_two, &none, false);
            for _ in 0..50 {
                if retried.is_ok() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
                retried = dp.sync(&wants_two, &none, false);
            }
            retried.expect("the retry finds the port");
            let local: Vec<SocketAddr> = dp
                .listening()
                .filter(|(k, _)| k.list == List::Local)
                .map(|(_, at)| at)
                .collect();
            assert_eq!(local, [addr("127.0.0.1:30200")]);
        },
    );
}
