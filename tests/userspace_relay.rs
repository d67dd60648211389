//! The userspace relay core with real sockets (root): each test runs in a fresh network
//! namespace, where every 127.0.0.0/8 address is on `lo`, with small servers of its own as
//! endpoints ("pods" named by the greeting they send) and the relay listening beside them.
//! The namespace, and with it everything the test made (sockets, the nftables table that
//! silences an endpoint), is removed when the test ends, also when it fails.
//!
//! The test's tokio runtime runs on a thread that entered the namespace, so every socket the
//! relay and the servers open is the namespace's.

use support::relay_pods;

use std::io;
use std::time::Duration;

use kube_proxy_rs::dataplane::userspace::relay::{Affinity, DialPolicy, Listener, Relay, Settings};
use relay_pods::{addr, in_netns, pod, udp_pod};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::{TcpStream, UdpSocket};
use tokio::time::{Instant, timeout};

use support::relay_clients;

use relay_clients::{
    STEP, assert_closed, connect, connect_from, counters_until, exchange, line, settings, target,
    tcp_listener, udp_listener,
};

#[test]
fn round_robin_alternates_between_endpoints() {
    in_netns(
        |_| {},
        || async {
            let a = pod("127.0.0.2:8080", "a").await;
            let b = pod("127.0.0.3:8080", "b").await;
            let relay = Relay::new(settings());
            let listener = tcp_listener(&relay, &[a, b], None);
            let mut seen = Vec::new();
            for _ in 0..4 {
                seen.push(connect(&listener).await.pod);
            }
            assert_eq!(seen, ["a", "b", "a", "b"]);
            let counters = listener.counters();
            assert_eq!(counters.total, 4);
            assert_eq!(counters.dial_failures, 0);
        },
    );
}

#[test]
fn refusing_endpoint_is_skipped_and_the_client_still_connects() {
    in_netns(
        |_| {},
        || async {
            let refusing = addr("127.0.0.3:8080");
            let b = pod("127.0.0.2:8080", "b").await;
            let relay = Relay::new(settings());
            let listener = tcp_listener(&relay, &[refusing, b], None);
            for _ in 0..3 {
                assert_eq!(connect(&listener).await.pod, "b");
            }
            let counters = listener.counters();
            assert!(counters.dial_failures >= 1, "{counters:?}");
            assert_eq!(counters.retries, counters.dial_failures);
            assert_eq!(counters.no_endpoint, 0);
        },
    );
}

/// The endpoint's address drops every TCP packet sent to it, so its dial only times out.
const SILENT: &str = "
table inet kprs-relay-test {
  chain input {
    type filter hook input priority 0;
    ip daddr 127.0.0.4 tcp dport 8080 drop
  }
}
";

#[test]
fn silent_endpoint_is_skipped_after_the_dial_timeout() {
    in_netns(
        |ns| {
            ns.output_fed("nft", &["-f", "-"], SILENT);
        },
        || async {
            let silent = addr("127.0.0.4:8080");
            let b = pod("127.0.0.2:8080", "b").await;
            let relay = Relay::new(settings());
            let listener = tcp_listener(&relay, &[silent, b], None);
            let started = Instant::now();
            assert_eq!(connect(&listener).await.pod, "b");
            let took = started.elapsed();
            assert!(
                took >= Duration::from_millis(300),
                "answered in {took:?}, before the silent endpoint's dial timeout"
            );
            let counters = listener.counters();
            assert_eq!((counters.dial_failures, counters.retries), (1, 1));
        },
    );
}

#[test]
fn client_is_refused_when_every_endpoint_fails() {
    in_netns(
        |_| {},
        || async {
            let refusing = [addr("127.0.0.3:8080"), addr("127.0.0.5:8080")];
            let backoff = Duration::from_millis(200);
            let relay = Relay::new(Settings {
                dial: DialPolicy::new(vec![Duration::from_millis(300); 4], backoff),
                ..settings()
            });
            let listener = tcp_listener(&relay, &refusing, None);
            let started = Instant::now();
            let stream = TcpStream::connect(listener.local_addr()).await.unwrap();
            assert_closed(&mut BufReader::new(stream)).await;
            // Two fresh endpoints without pause, then two revisits: 200 ms, then 400 ms.
            let took = started.elapsed();
            assert!(took >= backoff * 3, "revisits backed off: {took:?}");
            assert!(took < backoff * 3 + STEP, "{took:?}");
            let counters = listener.counters();
            assert_eq!(counters.dial_failures, 4, "every attempt: {counters:?}");
            assert_eq!(counters.retries, 3);
            assert_eq!(counters.no_endpoint, 1);
            assert_eq!(counters.active, 0);
        },
    );
}

#[test]
fn client_is_refused_at_once_without_endpoints() {
    in_netns(
        |_| {},
        || async {
            let relay = Relay::new(settings());
            let listener = tcp_listener(&relay, &[], None);
            let stream = TcpStream::connect(listener.local_addr()).await.unwrap();
            assert_closed(&mut BufReader::new(stream)).await;
            let counters = listener.counters();
            assert_eq!((counters.no_endpoint, counters.dial_failures), (1, 0));
        },
    );
}

#[test]
fn client_that_shuts_its_write_side_still_gets_the_reply() {
    in_netns(
        |_| {},
        || async {
            let a = pod("127.0.0.2:8080", "a").await;
            let relay = Relay::new(settings());
            let listener = tcp_listener(&relay, &[a], None);
            let mut client = connect(&listener).await;
            client.stream.write_all(b"ping\n").await.unwrap();
            client.stream.get_mut().shutdown().await.unwrap();
            let mut rest = String::new();
            timeout(STEP, client.stream.read_to_string(&mut rest))
                .await
                .expect("reply in time")
                .expect("reply");
            assert_eq!(
                rest, "ping\nbye\n",
                "the echo, then the pod's answer to EOF"
            );
            counters_until(&listener, |c| c.active == 0).await;
            let counters = listener.counters();
            assert_eq!(counters.bytes_to_endpoint, 5);
            assert_eq!(counters.bytes_to_client, "a\nping\nbye\n".len() as u64);
        },
    );
}

#[test]
fn removing_an_endpoint_closes_its_connections_and_keeps_the_others() {
    in_netns(
        |_| {},
        || async {
            let a = pod("127.0.0.2:8080", "a").await;
            let b = pod("127.0.0.3:8080", "b").await;
            let relay = Relay::new(settings());
            let listener = tcp_listener(&relay, &[a, b], None);
            let mut to_a = connect(&listener).await;
            let mut to_b = connect(&listener).await;
            assert_eq!((to_a.pod.as_str(), to_b.pod.as_str()), ("a", "b"));

            let c = pod("127.0.0.4:8080", "c").await;
            listener.update(vec![b, c], None);
            assert_closed(&mut to_a.stream).await;
            to_b.stream.write_all(b"still here\n").await.unwrap();
            assert_eq!(line(&mut to_b.stream).await.unwrap(), "still here");
            let next = [connect(&listener).await, connect(&listener).await];
            let pods: Vec<&str> = next.iter().map(|c| c.pod.as_str()).collect();
            assert_eq!(pods, ["b", "c"], "new connections use the new endpoints");
            counters_until(&listener, |c| c.active == 3).await;
        },
    );
}

#[test]
fn a_terminating_endpoint_keeps_its_connections_and_gets_no_new_ones() {
    in_netns(
        |_| {},
        || async {
            let a = pod("127.0.0.2:8080", "a").await;
            let b = pod("127.0.0.3:8080", "b").await;
            let relay = Relay::new(settings());
            let listener = tcp_listener(&relay, &[a, b], None);
            let mut to_a = connect(&listener).await;
            assert_eq!(to_a.pod, "a");
            // a turns terminating: still in the slice, no longer selected.
            listener.update_keeping(vec![b], &[a, b], None);
            let next = [connect(&listener).await, connect(&listener).await];
            let pods: Vec<&str> = next.iter().map(|c| c.pod.as_str()).collect();
            assert_eq!(
                pods,
                ["b", "b"],
                "new connections avoid the terminating endpoint"
            );
            to_a.stream.write_all(b"draining\n").await.unwrap();
            assert_eq!(line(&mut to_a.stream).await.unwrap(), "draining");
            // a leaves the slice: now its connection closes.
            listener.update_keeping(vec![b], &[b], None);
            assert_closed(&mut to_a.stream).await;
        },
    );
}

#[test]
fn idle_listeners_take_no_task_of_their_own_and_close_when_dropped() {
    in_netns(
        |_| {},
        || async {
            let a = pod("127.0.0.2:8080", "a").await;
            let ua = udp_pod("127.0.0.2:5353", "a").await;
            let metrics = tokio::runtime::Handle::current().metrics();
            let relay = Relay::new(settings());
            let before = metrics.num_alive_tasks();
            let mut tcp: Vec<Listener> =
                (0..50).map(|_| tcp_listener(&relay, &[a], None)).collect();
            let udp: Vec<Listener> = (0..50).map(|_| udp_listener(&relay, &[ua])).collect();
            tokio::task::yield_now().await;
            let idle = metrics.num_alive_tasks();
            assert!(
                idle <= before + 1,
                "100 idle listeners: {before} tasks before, {idle} after (one driver at most)"
            );
            // Every one of them still serves.
            assert_eq!(connect(&tcp[49]).await.pod, "a");
            let client = UdpSocket::bind(addr("127.0.0.1:0")).await.unwrap();
            assert_eq!(exchange(&client, udp[7].local_addr(), "hi").await.0, "a:hi");
            // A dropped listener stops accepting at once: its port refuses before the relay's
            // driving task (on this single-threaded runtime, not run in between) ends its loop.
            let gone = tcp.pop().unwrap().local_addr();
            let refused = std::net::TcpStream::connect_timeout(&gone, STEP);
            assert_eq!(
                refused.map(|_| ()).unwrap_err().kind(),
                io::ErrorKind::ConnectionRefused,
                "the dropped listener's port refuses"
            );
        },
    );
}

#[test]
fn affinity_keeps_a_client_on_one_endpoint() {
    in_netns(
        |_| {},
        || async {
            let a = pod("127.0.0.2:8080", "a").await;
            let b = pod("127.0.0.3:8080", "b").await;
            let relay = Relay::new(settings());
            let affinity = Some(Affinity::new(Duration::from_secs(60)));
            let listener = tcp_listener(&relay, &[a, b], affinity);
            let mut seen = Vec::new();
            for _ in 0..4 {
                seen.push(connect(&listener).await.pod);
            }
            assert_eq!(seen, ["a", "a", "a", "a"]);
        },
    );
}

/// Two listeners of one service port (its cluster-wide and its local endpoints, say) share
/// one affinity table: a client that one listener sent to a pod is sent there by the other
/// too, where that listener's round-robin would have chosen another pod.
#[test]
fn listeners_sharing_an_affinity_table_keep_a_client_on_one_endpoint() {
    in_netns(
        |_| {},
        || async {
            let a = pod("127.0.0.2:8080", "a").await;
            let b = pod("127.0.0.3:8080", "b").await;
            let relay = Relay::new(settings());
            let shared = Affinity::new(Duration::from_secs(60));
            let first = tcp_listener(&relay, &[a, b], Some(shared.clone()));
            let second = tcp_listener(&relay, &[a, b], Some(shared));
            assert_eq!(connect_from(&second, "127.0.0.9").await.pod, "a");
            assert_eq!(connect_from(&first, "127.0.0.5").await.pod, "a");
            assert_eq!(
                connect_from(&second, "127.0.0.5").await.pod,
                "a",
                "not b, the second listener's turn: the client's pod is a"
            );
        },
    );
}

#[test]
fn connections_beyond_the_service_limit_are_refused() {
    in_netns(
        |_| {},
        || async {
            let a = pod("127.0.0.2:8080", "a").await;
            let relay = Relay::new(Settings {
                max_connections_per_service: 1,
                ..settings()
            });
            let listener = tcp_listener(&relay, &[a], None);
            let first = connect(&listener).await;
            let second = TcpStream::connect(listener.local_addr()).await.unwrap();
            assert_closed(&mut BufReader::new(second)).await;
            assert_eq!(listener.counters().over_limit, 1);
            drop(first);
            counters_until(&listener, |c| c.active == 0).await;
            assert_eq!(connect(&listener).await.pod, "a", "room again");
        },
    );
}

#[test]
fn listeners_of_one_service_share_its_limit() {
    in_netns(
        |_| {},
        || async {
            let a = pod("127.0.0.2:8080", "a").await;
            let relay = Relay::new(Settings {
                max_connections_per_service: 1,
                ..settings()
            });
            let shared = target(&relay, &[a], None);
            let internal = relay
                .listen_tcp(addr("127.0.0.1:0"), shared.clone())
                .expect("relay listens");
            let external = relay
                .listen_tcp(addr("127.0.0.1:0"), shared)
                .expect("relay listens");
            let other_service = tcp_listener(&relay, &[a], None);
            let _held = connect(&internal).await;
            let refused = TcpStream::connect(external.local_addr()).await.unwrap();
            assert_closed(&mut BufReader::new(refused)).await;
            assert_eq!(external.counters().over_limit, 1);
            assert_eq!(connect(&other_service).await.pod, "a", "its own limit");
        },
    );
}
