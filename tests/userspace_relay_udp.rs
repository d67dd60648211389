//! The userspace relay core's UDP and IPv6 with real sockets (root), as `userspace_relay.rs`
//! does TCP: each test runs in a fresh network namespace, where every 127.0.0.0/8 address is on
//! `lo`, with small servers of its own as endpoints and the relay listening beside them; the
//! namespace goes when the test ends, also when it fails.

use support::relay_pods;

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use kube_proxy_rs::dataplane::userspace::relay::{Relay, Settings};
use relay_pods::{addr, in_netns, pod, udp_pod};
use tokio::io::BufReader;
use tokio::net::{TcpStream, UdpSocket};

use support::relay_clients;

use relay_clients::{
    STEP, connect, counters_until, exchange, line, settings, target, udp_listener,
};

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
