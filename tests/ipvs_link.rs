//! Our `kube-ipvs0` client against a real kernel with the dummy driver. This host's
//! kernel has no dummy device, so one User-mode Linux boot (`support/uml.rs`) re-runs this test
//! binary inside the guest (`ipvs_link_helper_process`), which runs every case, each in a
//! network namespace of its own (`ipl-…`), removed when the case ends, also on failure:
//! - `lifecycle`: the link created twice (the same link, a dummy, DOWN by `ip -d link`);
//!   addresses of both families bound by upstream's rule (an external IP already on a veth is
//!   not), read back with ours and with `ip addr`; their `local` routes; a TCP connection to
//!   a bound address reaching a listener on the wildcard address while the link is down, and
//!   none to an unbound one; binding again and unbinding again counted as already done; an
//!   external IP that appears on the veth unbound by the next sync; the link deleted;
//! - `not-a-dummy`: a veth named `kube-ipvs0` is refused with a clear error, by creating and
//!   by deleting, and is left in place;
//! - `scale`: thousands of addresses bound, dumped and unbound, with the times printed.
//!
//! Traffic goes only between addresses this test puts into its own namespace.

#![allow(
    clippy::disallowed_methods,
    reason = "a kernel test: boots a UML guest, runs ip, re-executes itself"
)]

use support::uml;

use std::collections::BTreeSet;
use std::io::{Read as _, Write as _};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use kube_proxy_rs::dataplane::ipvs::backend::link::{
    AddressChanges, Client, Error, Link, ServiceAddresses, address_changes,
};
use kube_proxy_rs::dataplane::ipvs::names::LINK;
use kube_proxy_rs::netlink::netns;
use uml::host::NetNs;
use uml::host::helper_process::{HelperProcess, RESULT};

/// What the guest loads: the dummy driver under test, veth for the other interfaces, and IPv6
/// (a module in Debian's UML kernel, built in on ordinary ones).
const MODULES: &[&str] = &["ipv6", "dummy", "veth"];
/// Every case the guest runs, in order.
const CASES: &[&str] = &["lifecycle", "not-a-dummy", "scale"];

#[test]
fn kube_ipvs0_and_its_addresses_work_on_a_kernel_with_the_dummy_driver() {
    let others = uml::run_cases(MODULES, &HELPER, "guest", CASES, Duration::from_secs(180));
    for r in others.into_iter().flatten() {
        println!("{r}");
    }
}

/// The entry below, run inside the guest.
const HELPER: HelperProcess = HelperProcess::new("ipvs_link_helper_process");

/// Not a test of its own: the cases, run inside the guest. Without the environment variable it
/// does nothing.
#[test]
fn ipvs_link_helper_process() {
    HELPER.when_requested(|role| {
        assert_eq!(role, "guest", "unknown role");
        let cases: [(&str, fn()); 3] = [
            ("lifecycle", lifecycle),
            ("not-a-dummy", not_a_dummy),
            ("scale", scale),
        ];
        for (name, case) in cases {
            let started = Instant::now();
            case();
            println!("{RESULT}{name} took {:?}", started.elapsed());
            println!("{RESULT}{name} ok");
        }
    });
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn set(ips: &[&str]) -> BTreeSet<IpAddr> {
    ips.iter().map(|s| ip(s)).collect()
}

/// The addresses `ip addr` shows on `dev`, with their prefix lengths ("10.96.0.1/32").
fn ip_addr_show(ns: &NetNs, dev: &str) -> BTreeSet<String> {
    ns.output("ip", &["-o", "addr", "show", "dev", dev])
        .lines()
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            words.find(|w| *w == "inet" || *w == "inet6")?;
            words.next().map(str::to_owned)
        })
        .collect()
}

/// `ip`'s local-table routes of both families.
fn local_routes(ns: &NetNs) -> String {
    let v4 = ns.output("ip", &["-4", "route", "show", "table", "local"]);
    let v6 = ns.output("ip", &["-6", "route", "show", "table", "local"]);
    format!("{v4}{v6}")
}

fn has_local_route(routes: &str, address: &str) -> bool {
    let want = format!("local {address} dev {LINK} ");
    routes.lines().any(|l| l.starts_with(&want))
}

/// A veth pair inside `ns`, up, its end `ipl-a` with node addresses of both families.
fn node_interface(ns: &NetNs) {
    ns.output(
        "ip",
        &[
            "link", "add", "ipl-a", "type", "veth", "peer", "name", "ipl-b",
        ],
    );
    ns.output("ip", &["addr", "add", "192.0.2.50/24", "dev", "ipl-a"]);
    ns.output(
        "ip",
        &["addr", "add", "2001:db8:50::1/64", "dev", "ipl-a", "nodad"],
    );
    ns.output("ip", &["link", "set", "ipl-a", "up"]);
    ns.output("ip", &["link", "set", "ipl-b", "up"]);
}

/// The listeners' ports: one per family, since a socket on `[::]` also takes IPv4
/// connections by default (`bindv6only` 0) and would collide with one on `0.0.0.0`.
const PORT_V4: u16 = 8080;
const PORT_V6: u16 = 8086;

/// Connects from `ns` to `to` and reads the byte the listener sends.
fn connect(ns: &str, to: SocketAddr) -> std::io::Result<u8> {
    let mut conn = netns::run_in(Some(ns), || {
        TcpStream::connect_timeout(&to, Duration::from_secs(3))
    })?;
    conn.set_read_timeout(Some(Duration::from_secs(3)))?;
    let mut byte = [0];
    conn.read_exact(&mut byte)?;
    Ok(byte[0])
}

/// A listener on the wildcard address of one family in `ns`, answering `count` connections
/// with one byte each.
fn serve(ns: &str, wildcard: SocketAddr, count: usize) -> std::thread::JoinHandle<()> {
    let listener =
        netns::run_in(Some(ns), || TcpListener::bind(wildcard)).expect("bind the listener");
    std::thread::spawn(move || {
        for _ in 0..count {
            let (mut conn, _) = listener.accept().expect("accept");
            conn.write_all(b"k").expect("answer");
        }
    })
}

fn lifecycle() {
    let ns = NetNs::new("ipl-link");
    node_interface(&ns);
    let mut client = Client::open(Some(&ns.name)).expect("open the rtnetlink client");

    let link = client.ensure_dummy(LINK).expect("create kube-ipvs0");
    let again = client.ensure_dummy(LINK).expect("ensure kube-ipvs0 again");
    assert_eq!(again, link, "the second call finds the same link");
    assert!(link.is_dummy() && !link.up, "{link:?}");
    let shown = ns.output("ip", &["-d", "link", "show", LINK]);
    let flags = shown.split(['<', '>']).nth(1).unwrap_or_default();
    assert!(!flags.split(',').any(|f| f == "UP"), "not set up: {shown}");
    assert!(flags.split(',').any(|f| f == "NOARP"), "{shown}");
    assert!(shown.contains("state DOWN"), "{shown}");
    assert!(
        shown.lines().any(|l| l.trim_start().starts_with("dummy ")),
        "a dummy link: {shown}"
    );

    // A sync: upstream's rule against the addresses read in the same dump.
    let services = ServiceAddresses {
        cluster_ips: set(&["10.96.0.1", "10.96.0.10", "fd00:96::1", "fd00:96::a"]),
        external: set(&["203.0.113.7", "192.0.2.50", "2001:db8:50::1"]),
    };
    let read = client.addresses(&link).expect("dump addresses");
    assert!(read.bound.is_empty(), "a new link holds nothing");
    assert_eq!(read.elsewhere, set(&["192.0.2.50", "2001:db8:50::1"]));
    let link_local = ip_addr_show(&ns, "ipl-a");
    assert!(
        link_local.iter().any(|a| a.starts_with("fe80:")),
        "the veth has a link-local address for the filter to drop: {link_local:?}"
    );
    let changes = address_changes(&read.bound, &services, &read.elsewhere);
    let wanted = set(&[
        "10.96.0.1",
        "10.96.0.10",
        "203.0.113.7",
        "fd00:96::1",
        "fd00:96::a",
    ]);
    assert_eq!(
        changes.bind, wanted,
        "external IPs on the veth are not bound"
    );
    let updated = client.update(&link, &changes).expect("bind");
    assert_eq!(updated.bound, wanted);
    let twice = client.update(&link, &changes).expect("bind again");
    assert_eq!(twice.already_bound, wanted, "EEXIST counts as bound");
    assert!(twice.bound.is_empty());

    assert_eq!(client.bound_addresses(&link).expect("read back"), wanted);
    assert_eq!(
        ip_addr_show(&ns, LINK),
        [
            "10.96.0.1/32",
            "10.96.0.10/32",
            "203.0.113.7/32",
            "fd00:96::1/128",
            "fd00:96::a/128"
        ]
        .map(str::to_owned)
        .into(),
        "ip addr agrees"
    );
    let v6_shown = ns.output("ip", &["-6", "addr", "show", "dev", LINK]);
    assert!(
        !v6_shown.contains("tentative"),
        "IPv6 addresses on the down dummy skip duplicate address detection: {v6_shown}"
    );
    let routes = local_routes(&ns);
    for address in &wanted {
        assert!(
            has_local_route(&routes, &address.to_string()),
            "a local route for {address} on the down link:\n{routes}"
        );
    }
    let nodes = client
        .local_addresses_except(&link)
        .expect("node addresses");
    assert_eq!(nodes, set(&["192.0.2.50", "2001:db8:50::1"]));

    // Local delivery with the link down: a listener on the wildcard address answers a bound
    // address; an unbound one of the same range is not reachable.
    let v4 = serve(&ns.name, (Ipv4Addr::UNSPECIFIED, PORT_V4).into(), 1);
    let v6 = serve(&ns.name, (Ipv6Addr::UNSPECIFIED, PORT_V6).into(), 1);
    for to in ["10.96.0.10:8080", "[fd00:96::a]:8086"] {
        let byte = connect(&ns.name, to.parse().unwrap());
        assert_eq!(byte.expect(to), b'k', "{to}");
    }
    v4.join().expect("v4 listener");
    v6.join().expect("v6 listener");
    let unbound = connect(&ns.name, (ip("10.96.0.99"), PORT_V4).into());
    assert!(unbound.is_err(), "10.96.0.99 is not local: {unbound:?}");

    // The next sync: two ClusterIPs gone, and the external IP now on the veth.
    ns.output("ip", &["addr", "add", "203.0.113.7/32", "dev", "ipl-a"]);
    let services = ServiceAddresses {
        cluster_ips: set(&["10.96.0.1", "fd00:96::1"]),
        ..services
    };
    let read = client.addresses(&link).expect("dump addresses");
    let changes = address_changes(&read.bound, &services, &read.elsewhere);
    let dropped = set(&["10.96.0.10", "203.0.113.7", "fd00:96::a"]);
    assert_eq!(changes.unbind, dropped);
    assert!(changes.bind.is_empty());
    let updated = client.update(&link, &changes).expect("unbind");
    assert_eq!(updated.unbound, dropped);
    let twice = client.update(&link, &changes).expect("unbind again");
    assert_eq!(
        twice.already_unbound, dropped,
        "EADDRNOTAVAIL counts as unbound"
    );
    assert_eq!(
        client.bound_addresses(&link).expect("read back"),
        set(&["10.96.0.1", "fd00:96::1"])
    );
    assert_eq!(
        ip_addr_show(&ns, LINK),
        ["10.96.0.1/32", "fd00:96::1/128"].map(str::to_owned).into()
    );
    let routes = local_routes(&ns);
    assert!(!has_local_route(&routes, "10.96.0.10"), "{routes}");
    assert!(!has_local_route(&routes, "fd00:96::a"), "{routes}");
    assert!(
        routes.contains("local 203.0.113.7 dev ipl-a "),
        "the veth's own address keeps its local route:\n{routes}"
    );

    assert!(client.delete_dummy(LINK).expect("delete kube-ipvs0"));
    assert!(ns.try_output("ip", &["link", "show", LINK]).is_err());
    assert_eq!(client.find(LINK).expect("look up"), None);
    let routes = local_routes(&ns);
    assert!(!has_local_route(&routes, "10.96.0.1"), "{routes}");
    assert!(
        !client.delete_dummy(LINK).expect("delete again"),
        "nothing to delete"
    );

    // A refusal names the change, the address and the link.
    let stale = AddressChanges {
        bind: set(&["10.96.0.1"]),
        unbind: BTreeSet::new(),
    };
    let err = client.update(&link, &stale).expect_err("the link is gone");
    let text = err.to_string();
    assert_eq!(err.errno(), Some(19), "ENODEV: {text}");
    assert!(
        text.starts_with("the kernel refused to bind 10.96.0.1/32 on kube-ipvs0: "),
        "{text}"
    );
    println!("{RESULT}lifecycle error after deletion: {text}");
}

fn not_a_dummy() {
    let ns = NetNs::new("ipl-veth");
    ns.output(
        "ip",
        &[
            "link", "add", LINK, "type", "veth", "peer", "name", "ipl-peer",
        ],
    );
    let mut client = Client::open(Some(&ns.name)).expect("open the rtnetlink client");
    let err = client.ensure_dummy(LINK).expect_err("a veth is not ours");
    assert!(
        matches!(&err, Error::NotDummy { name, kind } if name == LINK && kind.as_deref() == Some("veth")),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(
        text.contains("kube-ipvs0") && text.contains("veth") && text.contains("not a dummy"),
        "{text}"
    );
    println!("{RESULT}not-a-dummy error: {text}");
    let err = client.delete_dummy(LINK).expect_err("not deleted");
    assert!(matches!(err, Error::NotDummy { .. }), "{err:?}");
    let shown = ns.output("ip", &["-d", "link", "show", LINK]);
    assert!(shown.contains("veth"), "the veth stays: {shown}");
}

/// IPv4 and IPv6 addresses for the scale case: 10.100.0.0/16 and fd00:100::/64.
fn many(v4: u32, v6: u32) -> BTreeSet<IpAddr> {
    let four = (0..v4).map(|i| IpAddr::V4(Ipv4Addr::from(0x0a64_0000 + i)));
    let six =
        (0..v6).map(|i| IpAddr::V6(Ipv6Addr::new(0xfd00, 0x100, 0, 0, 0, 0, 0, i as u16 + 1)));
    four.chain(six).collect()
}

fn scale() {
    const V4: u32 = 5000;
    const V6: u32 = 1000;
    let ns = NetNs::new("ipl-scale");
    let mut client = Client::open(Some(&ns.name)).expect("open the rtnetlink client");
    let link: Link = client.ensure_dummy(LINK).expect("create kube-ipvs0");
    let addresses = many(V4, V6);
    let bind = AddressChanges {
        bind: addresses.clone(),
        unbind: BTreeSet::new(),
    };
    let started = Instant::now();
    let updated = client.update(&link, &bind).expect("bind many");
    let bound_in = started.elapsed();
    assert_eq!(updated.bound.len(), addresses.len());
    let started = Instant::now();
    let read = client.addresses(&link).expect("dump");
    let dumped_in = started.elapsed();
    assert_eq!(read.bound, addresses);
    let shown = ns.output("ip", &["-o", "addr", "show", "dev", LINK]);
    assert_eq!(shown.lines().count(), addresses.len(), "ip addr agrees");
    let started = Instant::now();
    let noop = address_changes(
        &read.bound,
        &ServiceAddresses {
            cluster_ips: addresses.clone(),
            external: BTreeSet::new(),
        },
        &read.elsewhere,
    );
    let diffed_in = started.elapsed();
    assert!(noop.is_empty());
    let unbind = AddressChanges {
        bind: BTreeSet::new(),
        unbind: addresses.clone(),
    };
    let started = Instant::now();
    let updated = client.update(&link, &unbind).expect("unbind many");
    let unbound_in = started.elapsed();
    assert_eq!(updated.unbound.len(), addresses.len());
    assert!(client.bound_addresses(&link).expect("dump").is_empty());
    println!(
        "{RESULT}scale {V4} IPv4 + {V6} IPv6 addresses: bound in {bound_in:?}, dumped in \
         {dumped_in:?}, diffed in {diffed_in:?}, unbound in {unbound_in:?}"
    );
    assert!(client.delete_dummy(LINK).expect("delete"));
}
