//! The IPVS mode end to end: the real `kube-proxy-rs` binary with
//! `--proxy-mode=ipvs`, real TCP traffic through the virtual services and the helper rules.
//!
//! It boots the qemu guest with Debian's own kernel (`support/guest.rs`) and re-runs this
//! binary inside it (`guest_ipvs_helper_process`). The lab suite runs in our User-mode Linux
//! build, with everything built in; this test is the one on a distribution's kernel, whose
//! IPVS schedulers and nf_tables expressions are modules that the proxy and its tools must
//! load (Debian's `user-mode-linux` package lacks the nf_tables families altogether, which is
//! why the lab has a kernel of its own). In the guest (no network card) the root namespace is the
//! node and runs the proxy from a manifest directory; two pod namespaces sit behind veths, one
//! serving TCP, and a client namespace outside the cluster reaches the node's address.
//! It checks:
//! - a ClusterIP reaches the pod from another pod, which keeps its address (detect-local);
//! - from the node, masqueraded (its source would be the Service address on `kube-ipvs0`);
//! - from the pod itself (hairpin), masqueraded;
//! - a NodePort reaches the pod from the external client, masqueraded (policy Cluster);
//! - a TCP connect to a Service without endpoints is refused at once by a reset: the node
//!   sends no ICMP error (IPVS alone answers with one, rate-limited per host);
//! - a host port is not reachable on a Service address (the VIP port filter, upstream's
//!   kubernetes#72236): refused, and the node's listener never sees the connection;
//! - round robin alternates between two endpoints; a Service annotated `sh` keeps one client
//!   on one endpoint, and changing its annotation to `rr` takes effect live;
//! - graceful termination: a long-lived connection to an endpoint that starts terminating keeps
//!   working while new connections avoid it (weight 0), and its destination goes once the
//!   connection is closed;
//! - a restart of the proxy under load (a connection every 20 ms) fails no connection;
//! - the kernel's counters reach `/metrics` (`kubeproxy_rs_ipvs_connections_total`, read at
//!   the scrape);
//! - `--cleanup` removes every virtual service, `kube-ipvs0` and our nftables table.

#![allow(
    clippy::disallowed_methods,
    reason = "a kernel test: boots a guest, runs ip, nft and ipvsadm, re-executes itself"
)]

use support::guest;
use support::in_guest;
use support::manifest_yaml;
#[path = "guest_ipvs/manifests.rs"]
mod manifests;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use guest::host::helper_process::RESULT;
use in_guest::{
    CLUSTER_IP, NO_ENDPOINTS_IP, NODE_IP, POD_GATEWAY, eventually, icmp_unreachables_sent, output,
    run,
};
use manifests::{manifests, write_pair};

const SERVER_POD: &str = "10.244.0.2";
const CLIENT_POD: &str = "10.244.0.3";
const SECOND_SERVER_POD: &str = "10.244.0.4";
/// Two endpoints, the node's scheduler (rr).
const PAIR_IP: &str = "10.96.0.52";
/// The same two endpoints, the scheduler its annotation names.
const STICKY_IP: &str = "10.96.0.53";
const PORT: u16 = 80;
const TARGET_PORT: u16 = 8080;
const NODE_PORT: u16 = 30080;
/// A port the node itself listens on, on every address.
const HOST_PORT: u16 = 9999;
/// IPVS with the scheduler and the dummy link's driver; the nf_tables modules are
/// [`guest::NFT_MODULES`].
const MODULES: &[&str] = &["ip_vs", "ip_vs_rr", "dummy"];

#[test]
fn the_ipvs_mode_carries_real_traffic_in_a_guest() {
    in_guest::run_node(
        &HELPER,
        &[
            format!("pod to clusterip seen as {CLIENT_POD}"),
            format!("node to clusterip seen as {POD_GATEWAY}"),
            format!("hairpin seen as {POD_GATEWAY}"),
            format!("nodeport from outside seen as {POD_GATEWAY}"),
            "traffic counted per frontend".to_owned(),
            "rr alternates".to_owned(),
            "sh keeps the client on one endpoint".to_owned(),
            "annotation changed to rr live".to_owned(),
            "terminating endpoint: old connection kept, new ones avoid it, gone once closed"
                .to_owned(),
            "restart under load: no failed connection".to_owned(),
            "no endpoints: reset, no icmp".to_owned(),
            "host port on a service address: refused".to_owned(),
            "cleanup: nothing left".to_owned(),
        ],
    );
}

support::guest_helper_entry!(guest_ipvs_helper_process, node, serve, exchange);

fn network() {
    let mut cmds = in_guest::client_network();
    // Two pods, each behind its own veth, routed by /32 (as many CNIs do).
    for (ns, ip) in [
        ("server", SERVER_POD),
        ("cpod", CLIENT_POD),
        ("server2", SECOND_SERVER_POD),
    ] {
        cmds.extend([
            format!("ip netns add {ns}"),
            format!("ip link add v{ns} type veth peer name eth0 netns {ns}"),
            format!("ip addr add {POD_GATEWAY}/32 dev v{ns}"),
            format!("ip link set v{ns} up"),
            format!("ip route add {ip}/32 dev v{ns}"),
            format!("ip -n {ns} link set lo up"),
            format!("ip -n {ns} link set eth0 up"),
            format!("ip -n {ns} addr add {ip}/32 dev eth0"),
            format!("ip -n {ns} route add {POD_GATEWAY} dev eth0"),
            format!("ip -n {ns} route add default via {POD_GATEWAY}"),
        ]);
    }
    cmds.extend(
        MODULES
            .iter()
            .chain(guest::NFT_MODULES)
            .map(|m| format!("modprobe {m}")),
    );
    for cmd in &cmds {
        run(cmd);
    }
}

/// The node: network, manifests, the proxy, the probes.
fn node() {
    network();
    let mut servers: Vec<_> = ["server", "server2"]
        .into_iter()
        .map(|ns| {
            HELPER
                .in_netns(ns, "server")
                .spawn()
                .expect("start a pod's TCP server")
        })
        .collect();
    // The node's own service on every address, which a Service address must not expose.
    let host_listener = TcpListener::bind(("0.0.0.0", HOST_PORT)).expect("bind the host port");
    let host_accepted = Arc::new(AtomicUsize::new(0));
    {
        let accepted = host_accepted.clone();
        std::thread::spawn(move || {
            for conn in host_listener.incoming() {
                if conn.is_ok() {
                    accepted.fetch_add(1, Ordering::SeqCst);
                }
            }
        });
    }

    let dir = PathBuf::from("/tmp/kprs-ipvs-manifests");
    std::fs::create_dir_all(&dir).expect("manifest dir");
    std::fs::write(dir.join("cluster.yaml"), manifests()).expect("write manifests");
    write_pair(&dir, "sh", false);
    let log_path = "/tmp/kprs-ipvs-proxy.log";
    let proxy = std::cell::RefCell::new(start_proxy(&dir, log_path));

    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let cluster = format!("{CLUSTER_IP}:{PORT}");
        let seen = eventually(|| in_guest::client_in(&HELPER, "cpod", &cluster));
        println!("{RESULT}pod to clusterip seen as {seen}");
        let seen = eventually(|| exchange(cluster.parse().unwrap()));
        println!("{RESULT}node to clusterip seen as {seen}");
        let seen = eventually(|| in_guest::client_in(&HELPER, "server", &cluster));
        println!("{RESULT}hairpin seen as {seen}");
        let seen = eventually(|| {
            in_guest::client_in(&HELPER, "client", &format!("{NODE_IP}:{NODE_PORT}"))
        });
        println!("{RESULT}nodeport from outside seen as {seen}");

        // Three connections through the ClusterIP, one through a NodePort.
        let series = |frontend: &str| {
            format!(
                "kubeproxy_rs_ipvs_connections_total{{ip_family=\"IPv4\",namespace=\"default\",\
                 service=\"web\",port=\"http\",protocol=\"TCP\",frontend=\"{frontend}\"}} "
            )
        };
        let counted = |frontend: &str, at_least: u64| {
            let line = series(frontend);
            eventually(|| {
                let body = scrape()?;
                let value = body
                    .lines()
                    .find_map(|l| l.strip_prefix(line.as_str()))
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    .ok_or_else(|| format!("no {line} in the scrape"))?;
                (value >= at_least)
                    .then(|| value.to_string())
                    .ok_or_else(|| format!("{line}{value}"))
            })
        };
        let cluster = counted("cluster-ip", 3);
        let node_port = counted("node-port", 1);
        println!("counted {cluster} through the ClusterIP, {node_port} through the NodePort");
        println!("{RESULT}traffic counted per frontend");

        let icmp_before = icmp_unreachables_sent();
        for from in ["cpod", "node"] {
            let target = format!("{NO_ENDPOINTS_IP}:{PORT}");
            let started = Instant::now();
            let outcome = match from {
                "node" => exchange(target.parse().unwrap()),
                ns => in_guest::client_in(&HELPER, ns, &target),
            };
            let took = started.elapsed();
            match outcome {
                Err(e) if e.contains("refused") => {}
                other => panic!("{from} to a Service without endpoints: {other:?}"),
            }
            assert!(took < Duration::from_secs(2), "refused only after {took:?}");
        }
        assert_eq!(
            icmp_unreachables_sent(),
            icmp_before,
            "the refusals were ICMP errors, not TCP resets"
        );
        println!("{RESULT}no endpoints: reset, no icmp");

        match in_guest::client_in(&HELPER, "cpod", &format!("{CLUSTER_IP}:{HOST_PORT}")) {
            Err(e) if e.contains("refused") => {}
            other => panic!("a host port answered on a Service address: {other:?}"),
        }
        // Control: the same port on the node's own address does answer.
        let direct = TcpStream::connect_timeout(
            &format!("{NODE_IP}:{HOST_PORT}").parse().unwrap(),
            Duration::from_secs(3),
        );
        assert!(direct.is_ok(), "the host port itself: {direct:?}");
        drop(direct);
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(
            host_accepted.load(Ordering::SeqCst),
            1,
            "only the direct connection reached the host's listener"
        );
        println!("{RESULT}host port on a service address: refused");

        schedulers(&dir);
        graceful_termination(&dir);
        restart_under_load(&proxy, &dir, log_path);
    }));
    let mut proxy = proxy.into_inner();
    let _ = proxy.kill();
    let _ = proxy.wait();
    for server in &mut servers {
        let _ = server.kill();
        let _ = server.wait();
    }
    if let Err(panic) = outcome {
        let log = std::fs::read_to_string(log_path).unwrap_or_default();
        eprintln!(
            "proxy log:\n{log}\nipvsadm -Ln:\n{}\nnft list ruleset:\n{}",
            output("ipvsadm", &["-Ln"]),
            output("nft", &["list", "ruleset"])
        );
        std::panic::resume_unwind(panic);
    }

    let cleanup = Command::new(env!("CARGO_BIN_EXE_kube-proxy-rs"))
        .arg("--cleanup")
        .output()
        .expect("run --cleanup");
    assert!(
        cleanup.status.success(),
        "--cleanup: {}",
        String::from_utf8_lossy(&cleanup.stderr)
    );
    assert_eq!(output("ipvsadm", &["-Sn"]), "", "virtual services left");
    assert!(
        !output("ip", &["-o", "link", "show"]).contains("kube-ipvs0"),
        "kube-ipvs0 left"
    );
    let tables = output("nft", &["list", "tables"]);
    assert!(!tables.contains("kube-proxy-rs"), "{tables}");
    println!("{RESULT}cleanup: nothing left");
}

/// One TCP connection to `target`: sends a line, returns the source address the server saw.
/// A refusal's error says "refused".
fn exchange(target: SocketAddr) -> Result<String, String> {
    let mut stream = connect(target)?;
    ask(&mut stream).map(|(peer, _)| peer)
}

fn connect(target: SocketAddr) -> Result<TcpStream, String> {
    let stream =
        TcpStream::connect_timeout(&target, Duration::from_secs(3)).map_err(|e| {
            match e.kind() {
                ErrorKind::ConnectionRefused => format!("connect {target}: refused"),
                _ => format!("connect {target}: {e}"),
            }
        })?;
    stream
        .set_read_timeout(Some(Duration::from_secs(3)))
        .map_err(|e| e.to_string())?;
    // Closed with a reset: IPVS keeps a closed connection 10 s, one in TIME_WAIT 2 minutes,
    // and a draining destination goes only once it has none.
    socket2::SockRef::from(&stream)
        .set_linger(Some(Duration::ZERO))
        .map_err(|e| e.to_string())?;
    Ok(stream)
}

/// One line over an open connection: the source address the server saw and the server's own.
fn ask(stream: &mut TcpStream) -> Result<(String, String), String> {
    stream
        .write_all(b"hello\n")
        .map_err(|e| format!("send: {e}"))?;
    let mut buf = [0u8; 128];
    let n = stream.read(&mut buf).map_err(|e| format!("recv: {e}"))?;
    let reply = String::from_utf8_lossy(&buf[..n]).trim().to_owned();
    reply
        .strip_prefix("saw ")
        .and_then(|r| r.split_once(" at "))
        .map(|(peer, server)| (peer.to_owned(), server.to_owned()))
        .ok_or_else(|| format!("unexpected reply {reply:?}"))
}

/// The server that answers one new connection to `target` from the node.
fn server_of(target: &str) -> String {
    let mut stream = connect(target.parse().unwrap()).unwrap_or_else(|e| panic!("{e}"));
    ask(&mut stream)
        .unwrap_or_else(|e| panic!("{target}: {e}"))
        .1
}

/// A pod's server: answers each line of each connection with the peer address it saw and its
/// own, until the peer closes.
fn serve() {
    let listener = TcpListener::bind(("0.0.0.0", TARGET_PORT)).expect("bind");
    for conn in listener.incoming() {
        let Ok(mut stream) = conn else { continue };
        std::thread::spawn(move || {
            let peer = stream
                .peer_addr()
                .map(|p| p.ip().to_string())
                .unwrap_or_default();
            let own = stream
                .local_addr()
                .map(|p| p.ip().to_string())
                .unwrap_or_default();
            let mut buf = [0u8; 128];
            while matches!(stream.read(&mut buf), Ok(n) if n > 0) {
                if stream
                    .write_all(format!("saw {peer} at {own}\n").as_bytes())
                    .is_err()
                {
                    break;
                }
            }
        });
    }
}

fn start_proxy(dir: &std::path::Path, log_path: &str) -> std::process::Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log_path)
        .expect("proxy log");
    // A periodic sync every 2 s, which reads the draining destinations again.
    in_guest::start_proxy(dir, "ipvs", &["--ipvs-sync-period=2s"], log)
}

/// The scheduler `ipvsadm -Ln` shows for the TCP virtual service `vs`.
fn scheduler(vs: &str) -> Option<String> {
    output("ipvsadm", &["-Ln", "-t", vs])
        .lines()
        .find_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            (w.first() == Some(&"TCP") && w.get(1) == Some(&vs))
                .then(|| w.get(2).map(|s| s.to_string()))
        })
        .flatten()
}

/// The weight `ipvsadm -Ln` shows for `dest` of the TCP virtual service `vs`; `None` when
/// the destination is not there.
fn weight(vs: &str, dest: &str) -> Option<u32> {
    output("ipvsadm", &["-Ln", "-t", vs]).lines().find_map(|l| {
        let w: Vec<&str> = l.split_whitespace().collect();
        (w.first() == Some(&"->") && w.get(1) == Some(&dest))
            .then(|| w.get(3).and_then(|v| v.parse().ok()))
            .flatten()
    })
}

/// Waits up to 60 s for `what` to hold.
fn until(what: &str, mut check: impl FnMut() -> bool) {
    eventually(|| check().then(String::new).ok_or_else(|| what.to_owned()));
}

/// rr alternates; the `sh` annotation keeps the node on one endpoint; a changed annotation
/// applies live.
fn schedulers(dir: &std::path::Path) {
    let pair = format!("{PAIR_IP}:{PORT}");
    let sticky = format!("{STICKY_IP}:{PORT}");
    until("both services programmed", || {
        scheduler(&pair).is_some() && scheduler(&sticky).as_deref() == Some("sh")
    });
    let alternates = |target: &str| {
        let seen: Vec<String> = (0..4).map(|_| server_of(target)).collect();
        let distinct: std::collections::BTreeSet<&String> = seen.iter().collect();
        assert_eq!(distinct.len(), 2, "{target}: {seen:?}");
        assert!(seen.windows(2).all(|w| w[0] != w[1]), "{target}: {seen:?}");
    };
    alternates(&pair);
    println!("{RESULT}rr alternates");
    let seen: std::collections::BTreeSet<String> = (0..6).map(|_| server_of(&sticky)).collect();
    assert_eq!(seen.len(), 1, "sh: {seen:?}");
    println!("{RESULT}sh keeps the client on one endpoint");
    write_pair(dir, "rr", false);
    until("sticky's scheduler becomes rr", || {
        scheduler(&sticky).as_deref() == Some("rr")
    });
    alternates(&sticky);
    println!("{RESULT}annotation changed to rr live");
}

/// A long-lived connection to an endpoint that starts terminating.
fn graceful_termination(dir: &std::path::Path) {
    let pair = format!("{PAIR_IP}:{PORT}");
    let second = format!("{SECOND_SERVER_POD}:{TARGET_PORT}");
    let mut long = (0..4)
        .map(|_| {
            let mut s = connect(pair.parse().unwrap()).unwrap_or_else(|e| panic!("{e}"));
            let server = ask(&mut s).unwrap_or_else(|e| panic!("{e}")).1;
            (s, server)
        })
        .find(|(_, server)| server == SECOND_SERVER_POD)
        .map(|(s, _)| s)
        .expect("rr sends one of four connections to the second server");
    write_pair(dir, "rr", true);
    until("the terminating endpoint drains at weight 0", || {
        weight(&pair, &second) == Some(0)
    });
    for _ in 0..4 {
        assert_eq!(server_of(&pair), SERVER_POD, "a new connection avoids it");
    }
    let (_, server) = ask(&mut long).expect("the old connection still works");
    assert_eq!(server, SECOND_SERVER_POD);
    drop(long);
    until("the drained destination is deleted", || {
        weight(&pair, &second).is_none() && scheduler(&pair).is_some()
    });
    println!(
        "{RESULT}terminating endpoint: old connection kept, new ones avoid it, gone once closed"
    );
}

/// Kills the proxy and starts a new one while the node connects to a ClusterIP every 20 ms.
fn restart_under_load(
    proxy: &std::cell::RefCell<std::process::Child>,
    dir: &std::path::Path,
    log_path: &str,
) {
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let target: SocketAddr = format!("{CLUSTER_IP}:{PORT}").parse().unwrap();
            let (mut ok, mut failed) = (0u32, Vec::new());
            while !stop.load(Ordering::SeqCst) {
                match exchange(target) {
                    Ok(_) => ok += 1,
                    Err(e) => failed.push(e),
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            (ok, failed)
        })
    };
    std::thread::sleep(Duration::from_millis(500));
    {
        let mut old = proxy.borrow_mut();
        let _ = old.kill();
        let _ = old.wait();
    }
    *proxy.borrow_mut() = start_proxy(dir, log_path);
    // Up, and past its first sync (the adoption): its metrics answer with a sync counted.
    until("the new proxy synced", || {
        scrape().is_ok_and(|b| {
            b.lines().any(|l| {
                l.starts_with(
                    "kubeproxy_sync_proxy_rules_duration_seconds_count{ip_family=\"IPv4\"}",
                ) && !l.ends_with(" 0")
            })
        })
    });
    std::thread::sleep(Duration::from_secs(1));
    stop.store(true, Ordering::SeqCst);
    let (ok, failed) = load.join().expect("load thread");
    println!("restart under load: {ok} connections");
    assert!(failed.is_empty(), "{} failed: {failed:?}", failed.len());
    assert!(ok > 20, "only {ok} connections");
    println!("{RESULT}restart under load: no failed connection");
}

/// The proxy's `/metrics`, over plain HTTP/1.0.
fn scrape() -> Result<String, String> {
    let mut s =
        TcpStream::connect_timeout(&"127.0.0.1:10249".parse().unwrap(), Duration::from_secs(3))
            .map_err(|e| format!("metrics: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .map_err(|e| e.to_string())?;
    let mut body = String::new();
    s.read_to_string(&mut body).map_err(|e| e.to_string())?;
    Ok(body)
}
