//! The userspace relay core with real sockets (root): each test runs in a fresh network
//! namespace, where every 127.0.0.0/8 address is on `lo`, with small servers of its own as
//! endpoints ("pods" named by the greeting they send) and the relay listening beside them.
//! The namespace, and with it everything the test made (sockets, the nftables table that
//! silences an endpoint), is removed when the test ends, also when it fails.
//!
//! The test's tokio runtime runs on a thread that entered the namespace, so every socket the
//! relay and the servers open is the namespace's.

#[path = "support/relay_pods.rs"]
mod relay_pods;

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use kube_proxy_rs::dataplane::userspace::relay::{
    Affinity, CounterValues, DialPolicy, Listener, Relay, Settings, Target,
};
use relay_pods::{addr, in_netns, pod, udp_pod};
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::{TcpStream, UdpSocket};
use tokio::time::{Instant, sleep, timeout};

/// How long any single network step may take before the test fails rather than hangs.
const STEP: Duration = Duration::from_secs(5);

fn settings() -> Settings {
    Settings {
        dial: DialPolicy::new(
            vec![Duration::from_millis(300); 3],
            Duration::from_millis(10),
        ),
        ..Settings::default()
    }
}

fn target(relay: &Relay, endpoints: &[SocketAddr], affinity: Option<Affinity>) -> Target {
    Target {
        name: "test/web:http IPv4".into(),
        endpoints: endpoints.to_vec(),
        affinity,
        limit: relay.service_limit(),
    }
}

fn tcp_listener(relay: &Relay, endpoints: &[SocketAddr], affinity: Option<Affinity>) -> Listener {
    relay
        .listen_tcp(addr("127.0.0.1:0"), target(relay, endpoints, affinity))
        .expect("relay listens")
}

fn udp_listener(relay: &Relay, endpoints: &[SocketAddr]) -> Listener {
    relay
        .listen_udp(addr("127.0.0.1:0"), target(relay, endpoints, None))
        .expect("relay listens")
}

/// A client connection through the relay, with the pod's greeting read.
struct Client {
    stream: BufReader<TcpStream>,
    pod: String,
}

async fn connect(listener: &Listener) -> Client {
    greeted(TcpStream::connect(listener.local_addr())).await
}

/// [`connect`] from the client address `source` (a 127.0.0.0/8 address).
async fn connect_from(listener: &Listener, source: &str) -> Client {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(addr(&format!("{source}:0"))).unwrap();
    greeted(socket.connect(listener.local_addr())).await
}

/// The connection `connecting` makes, with the pod's greeting read.
async fn greeted(connecting: impl Future<Output = io::Result<TcpStream>>) -> Client {
    let stream = timeout(STEP, connecting)
        .await
        .expect("connect in time")
        .expect("the relay accepts");
    let mut stream = BufReader::new(stream);
    let pod = line(&mut stream).await.expect("a greeting from a pod");
    Client { stream, pod }
}

async fn line(stream: &mut BufReader<TcpStream>) -> io::Result<String> {
    let mut line = String::new();
    let n = timeout(STEP, stream.read_line(&mut line))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "no line in time"))??;
    if n == 0 {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    Ok(line.trim_end().to_owned())
}

/// Asserts the relay closed (reset or EOF) the connection without passing any byte.
async fn assert_closed(stream: &mut BufReader<TcpStream>) {
    let mut buf = [0u8; 64];
    match timeout(STEP, stream.read(&mut buf)).await {
        Ok(Ok(0)) => {}
        Ok(Err(e)) if e.kind() == io::ErrorKind::ConnectionReset => {}
        Ok(other) => panic!("expected the relay to close the connection, got {other:?}"),
        Err(_) => panic!("the relay left the connection open"),
    }
}

/// Waits until the counters satisfy `done`, for up to [`STEP`].
async fn counters_until(listener: &Listener, done: impl Fn(&CounterValues) -> bool) {
    let deadline = Instant::now() + STEP;
    while !done(&listener.counters()) {
        assert!(
            Instant::now() < deadline,
            "counters never got there: {:?}",
            listener.counters()
        );
        sleep(Duration::from_millis(10)).await;
    }
}

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

#[test]
fn udp_round_trip_comes_back_from_the_listener_and_idle_flows_expire() {
    in_netns(
        |_| {},
        || async {
            let a = udp_pod("127.0.0.2:5353", "a").await;
            let b = udp_pod("127.0.0.3:5353", "b").await;
            let relay = Relay::new(Settings {
                udp_idle_timeout: Duration::from_millis(300),
                ..settings()
            });
            let listener = udp_listener(&relay, &[a, b]);
            let one = UdpSocket::bind(addr("127.0.0.1:0")).await.unwrap();
            let two = UdpSocket::bind(addr("127.0.0.1:0")).await.unwrap();
            let to = listener.local_addr();
            assert_eq!(exchange(&one, to, "hi").await, ("a:hi".to_owned(), to));
            assert_eq!(exchange(&two, to, "hi").await, ("b:hi".to_owned(), to));
            assert_eq!(exchange(&one, to, "again").await.0, "a:again", "same flow");
            let counters = listener.counters();
            assert_eq!((counters.active, counters.total), (2, 2));

            counters_until(&listener, |c| c.active == 0).await;
            assert_eq!(exchange(&two, to, "back").await.0, "a:back", "a new flow");
            assert_eq!(listener.counters().total, 3);
        },
    );
}

#[test]
fn udp_endpoint_change_moves_new_flows() {
    in_netns(
        |_| {},
        || async {
            let a = udp_pod("127.0.0.2:5353", "a").await;
            let b = udp_pod("127.0.0.3:5353", "b").await;
            let relay = Relay::new(Settings {
                udp_idle_timeout: Duration::from_secs(30),
                ..settings()
            });
            let listener = udp_listener(&relay, &[a]);
            let client = UdpSocket::bind(addr("127.0.0.1:0")).await.unwrap();
            let to = listener.local_addr();
            assert_eq!(exchange(&client, to, "x").await.0, "a:x");
            listener.update(vec![b], None);
            assert_eq!(exchange(&client, to, "y").await.0, "b:y");
            counters_until(&listener, |c| c.active == 1 && c.total == 2).await;
        },
    );
}

#[test]
fn udp_replies_come_from_the_address_the_client_sent_to() {
    in_netns(
        |_| {},
        || async {
            let a = udp_pod("127.0.0.2:5353", "a").await;
            let relay = Relay::new(settings());
            // Bound to every address, as with the default --bind-address: the route back to
            // the client alone would pick 127.0.0.1 as the source.
            let listener = relay
                .listen_udp(addr("0.0.0.0:0"), target(&relay, &[a], None))
                .expect("relay listens");
            let client = UdpSocket::bind(addr("127.0.0.1:0")).await.unwrap();
            let to = SocketAddr::new(addr("127.0.0.9:0").ip(), listener.local_addr().port());
            assert_eq!(exchange(&client, to, "hi").await, ("a:hi".to_owned(), to));
        },
    );
}

#[test]
fn udp_flow_to_an_unreachable_endpoint_ends_and_the_next_goes_elsewhere() {
    in_netns(
        |_| {},
        || async {
            let closed = addr("127.0.0.3:5353");
            let b = udp_pod("127.0.0.2:5353", "b").await;
            let relay = Relay::new(Settings {
                udp_idle_timeout: Duration::from_secs(30),
                ..settings()
            });
            let listener = udp_listener(&relay, &[closed, b]);
            let client = UdpSocket::bind(addr("127.0.0.1:0")).await.unwrap();
            let to = listener.local_addr();
            client.send_to(b"lost", to).await.unwrap();
            // The kernel answers the flow's socket with port unreachable: the flow ends.
            counters_until(&listener, |c| c.dial_failures == 1 && c.active == 0).await;
            assert_eq!(exchange(&client, to, "again").await.0, "b:again");
        },
    );
}

#[test]
fn ipv6_listeners_relay_tcp_and_udp() {
    in_netns(
        |_| {},
        || async {
            let a = pod("[::1]:0", "a").await;
            let b = pod("[::1]:0", "b").await;
            let ua = udp_pod("[::1]:0", "a").await;
            let relay = Relay::new(settings());
            let tcp = relay
                .listen_tcp(addr("[::1]:0"), target(&relay, &[a, b], None))
                .expect("relay listens");
            let seen = [connect(&tcp).await.pod, connect(&tcp).await.pod];
            assert_eq!(seen, ["a", "b"]);
            let udp = relay
                .listen_udp(addr("[::1]:0"), target(&relay, &[ua], None))
                .expect("relay listens");
            let client = UdpSocket::bind(addr("[::1]:0")).await.unwrap();
            let to = udp.local_addr();
            assert_eq!(exchange(&client, to, "hi").await, ("a:hi".to_owned(), to));
        },
    );
}

/// Sends `text` to `to` and returns the reply and where it came from.
async fn exchange(socket: &UdpSocket, to: SocketAddr, text: &str) -> (String, SocketAddr) {
    socket.send_to(text.as_bytes(), to).await.unwrap();
    let mut buf = [0u8; 1024];
    let (n, from) = timeout(STEP, socket.recv_from(&mut buf))
        .await
        .expect("a reply in time")
        .unwrap();
    (String::from_utf8_lossy(&buf[..n]).into_owned(), from)
}

/// An IPv6 listener on the unspecified address takes IPv6 only: an IPv4 client at its port
/// finds nothing there (the IPv4 rules guard the IPv4 listeners' ports alone).
#[test]
fn ipv6_listeners_on_the_unspecified_address_take_no_ipv4() {
    in_netns(
        |_| {},
        || async {
            let a = pod("[::1]:0", "a").await;
            let ua = udp_pod("[::1]:0", "a").await;
            let relay = Relay::new(settings());
            let tcp = relay
                .listen_tcp(addr("[::]:0"), target(&relay, &[a], None))
                .expect("relay listens");
            let v6 = SocketAddr::new("::1".parse().unwrap(), tcp.local_addr().port());
            let mut stream = BufReader::new(TcpStream::connect(v6).await.expect("IPv6 connects"));
            assert_eq!(line(&mut stream).await.unwrap(), "a");
            let v4 = SocketAddr::new([127, 0, 0, 1].into(), tcp.local_addr().port());
            let refused = TcpStream::connect(v4).await.map(|_| ()).unwrap_err();
            assert_eq!(refused.kind(), io::ErrorKind::ConnectionRefused);

            let udp = relay
                .listen_udp(addr("[::]:0"), target(&relay, &[ua], None))
                .expect("relay listens");
            let client = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            client
                .connect(SocketAddr::new(
                    [127, 0, 0, 1].into(),
                    udp.local_addr().port(),
                ))
                .unwrap();
            client.set_read_timeout(Some(STEP)).unwrap();
            client.send(b"hi").unwrap();
            let mut buf = [0u8; 64];
            let answer = client.recv(&mut buf).map(|_| ()).unwrap_err();
            assert_eq!(answer.kind(), io::ErrorKind::ConnectionRefused);
        },
    );
}
