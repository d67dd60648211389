//! The `traffic-counters` case: TCP connections from a director namespace through a NAT
//! virtual server to a backend namespace (the server is a thread of the helper, bound inside
//! it), then the destination's connection counts and STATS64 counters read with our client and
//! compared with `ipvsadm -Ln --stats --exact`.

use super::*;

const VIP: &str = "10.50.0.1:80";
const BACKEND: &str = "192.168.50.2:8080";
/// Connections opened and closed before the counters are read; one more stays open.
const CLOSED: usize = 3;

/// A TCP server bound in `ns`: answers each of `count` connections with one byte and closes
/// it once the client has.
fn serve(ns: &str, count: usize) -> std::thread::JoinHandle<()> {
    let listener = netns::run_in(Some(ns), || TcpListener::bind(BACKEND)).expect("bind server");
    std::thread::spawn(move || {
        for _ in 0..count {
            let (mut conn, _) = listener.accept().expect("accept");
            conn.set_read_timeout(Some(Duration::from_secs(20)))
                .expect("read timeout");
            conn.write_all(b"x").expect("answer");
            let _ = conn.read_to_end(&mut Vec::new());
        }
    })
}

/// Connects from `ns` to the virtual server and reads the server's byte.
fn connect(ns: &str) -> TcpStream {
    let mut conn = netns::run_in(Some(ns), || {
        TcpStream::connect_timeout(&addr(VIP), Duration::from_secs(5))
    })
    .expect("connect to the virtual server");
    conn.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("read timeout");
    let mut byte = [0];
    conn.read_exact(&mut byte).expect("the backend's answer");
    assert_eq!(&byte, b"x");
    conn
}

pub(super) fn traffic_counters() {
    let director = NetNs::new("ipvs-director");
    let backend = NetNs::new("ipvs-backend");
    stdout_of(std::process::Command::new("ip").args([
        "-n",
        &director.name,
        "link",
        "add",
        "vd",
        "type",
        "veth",
        "peer",
        "name",
        "vb",
        "netns",
        &backend.name,
    ]));
    director.output("ip", &["addr", "add", "192.168.50.1/24", "dev", "vd"]);
    director.output("ip", &["link", "set", "vd", "up"]);
    // The VIP is local to the director, as on kube-ipvs0, so the director's own connections
    // reach IPVS.
    director.output("ip", &["addr", "add", "10.50.0.1/32", "dev", "lo"]);
    backend.output("ip", &["addr", "add", "192.168.50.2/24", "dev", "vb"]);
    backend.output("ip", &["link", "set", "vb", "up"]);
    backend.output("ip", &["route", "add", "default", "via", "192.168.50.1"]);

    let mut client = Client::open(Some(&director.name)).expect("open the IPVS client");
    let key = tcp(VIP);
    client
        .add_service(&Service::new(key, "rr"))
        .expect("add service");
    client
        .add_destination(&key, &Destination::masquerade(addr(BACKEND), 1))
        .expect("add destination");

    let server = serve(&backend.name, CLOSED + 1);
    for _ in 0..CLOSED {
        drop(connect(&director.name));
    }
    let held = connect(&director.name);

    // The kernel moves a connection to inactive as it sees the FINs, and (6.1) sums its
    // per-CPU counters into what it reports only in its estimator, every two seconds.
    let deadline = Instant::now() + Duration::from_secs(10);
    let listed = loop {
        let listed = client.destinations(&key).expect("list destinations");
        let [one] = listed.as_slice() else {
            panic!("one destination: {listed:?}")
        };
        let settled = (one.active_connections, one.inactive_connections) == (1, CLOSED as u32)
            && one.stats.connections == CLOSED as u64 + 1;
        if settled || Instant::now() > deadline {
            break one.clone();
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(
        (listed.active_connections, listed.inactive_connections),
        (1, CLOSED as u32),
        "{listed:?}"
    );
    let s = listed.stats;
    assert_eq!(s.connections, CLOSED as u64 + 1, "{s:?}");
    // Each connection: SYN, ACK, FIN and ACKs in; SYN-ACK, the byte, FIN out.
    assert!(s.packets_in >= 3 * (CLOSED as u64 + 1), "{s:?}");
    assert!(s.packets_out >= 2 * (CLOSED as u64 + 1), "{s:?}");
    assert!(
        s.bytes_in >= 40 * s.packets_in && s.bytes_out >= 40 * s.packets_out,
        "{s:?}"
    );
    capture("get_dest_dump_traffic_ipvs_uml_6.1", |raw| {
        client
            .destinations_raw(&key, raw)
            .expect("list destinations");
    });
    let services = client.services().expect("list services");
    assert_eq!(services.len(), 1);
    assert_eq!(
        services[0].stats.connections, s.connections,
        "service counts it too"
    );
    // ipvsadm reads the same counters.
    let stats = ns_stats_line(&director, BACKEND);
    assert_eq!(
        stats,
        format!(
            "-> {BACKEND} {} {} {} {} {}",
            s.connections, s.packets_in, s.packets_out, s.bytes_in, s.bytes_out
        )
    );
    println!(
        "{RESULT}counters: {} connections, {} packets in, {} out, {} bytes in, {} out",
        s.connections, s.packets_in, s.packets_out, s.bytes_in, s.bytes_out
    );
    drop(held);
    server.join().expect("server thread");
}

/// The destination's line of `ipvsadm -Ln --stats --exact`, squeezed.
fn ns_stats_line(ns: &NetNs, destination: &str) -> String {
    let out = squeezed(&ns.output("ipvsadm", &["-Ln", "--stats", "--exact"]));
    out.lines()
        .find(|l| l.starts_with(&format!("-> {destination} ")))
        .unwrap_or_else(|| panic!("no {destination} in:\n{out}"))
        .to_owned()
}
