//! Our IPVS netlink client against a real IPVS kernel. This host's kernel has no
//! IPVS, so one User-mode Linux boot (`support/uml.rs`) re-runs this test binary inside the
//! guest (`ipvs_netlink_helper_process`), which runs every case, each in network namespaces
//! of its own (IPVS tables are per namespace), removed when the case ends:
//! - `ours-to-ipvsadm`: services and destinations written by our client (rr, wrr, sh with
//!   sh-fallback and sh-port, mh with mh-port and persistence, SCTP, IPv6 with persistence,
//!   fwmark services of both families) and the timeouts read back with `ipvsadm -Sn`,
//!   `ipvsadm -Ln --persistent-conn` and `--timeout`, and with our own dumps;
//! - `ipvsadm-to-ours`: services restored with `ipvsadm -R`, read back with our dumps;
//! - `update-delete`: weight 0, a scheduler change in place, deletes, the kernel's errors for
//!   what is not there or is there already, flush;
//! - `traffic-counters`: TCP connections from a director namespace through a NAT virtual
//!   server to a backend namespace (the server is a thread of the helper, bound inside it),
//!   then the destination's connection counts and STATS64 counters read with our client;
//! - `unknown-scheduler`: the error names the scheduler the kernel has no module for.
//!
//! Traffic goes only between addresses this test puts into its own namespaces.
//! `UPDATE_GOLDENS=1` also stores the kernel's dump bytes as the decoder's fixtures
//! (`src/dataplane/ipvs/backend/netlink/testdata/`): the guest prints them, the host writes them.

#![allow(
    clippy::disallowed_methods,
    reason = "a kernel test: boots a UML guest, runs ipvsadm and ip, re-executes itself"
)]

#[path = "ipvs_netlink/pipelined.rs"]
mod pipelined;
#[path = "ipvs_netlink/traffic.rs"]
mod traffic;
use support::uml;

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use base64::Engine as _;

use kube_proxy_rs::cluster::IpFamily;
use kube_proxy_rs::dataplane::ipvs::backend::netlink::{
    Client, Destination, Error, Flags, ListedDestination, Protocol, Service, ServiceKey, Timeouts,
};
use kube_proxy_rs::netlink::netns;
use uml::host::helper_process::{HelperProcess, RESULT};
use uml::host::{NetNs, stdout_of};

/// What the guest loads: IPVS, the schedulers the cases use (others load on demand), veth.
const MODULES: &[&str] = &[
    "ip_vs",
    "ip_vs_rr",
    "ip_vs_wrr",
    "ip_vs_sh",
    "ip_vs_mh",
    "ip_vs_wlc",
    "veth",
];
/// Every case the guest runs, in order.
const CASES: &[&str] = &[
    "ours-to-ipvsadm",
    "ipvsadm-to-ours",
    "update-delete",
    "traffic-counters",
    "unknown-scheduler",
    "pipelined",
];

#[test]
fn our_ipvs_client_and_ipvsadm_agree_on_a_real_ipvs_kernel() {
    let update = std::env::var("UPDATE_GOLDENS").is_ok_and(|v| v == "1");
    let role = if update { "guest-capture" } else { "guest" };
    let others = uml::run_cases(MODULES, &HELPER, role, CASES, Duration::from_secs(180));
    for r in others.into_iter().flatten() {
        match r.strip_prefix("capture ").and_then(|c| c.split_once(' ')) {
            Some((name, bytes)) => store_fixture(name, bytes),
            None => println!("{r}"),
        }
    }
}

#[test]
fn the_uml_harness_reports_the_command_s_status_and_kills_a_guest_at_its_limit() {
    let Some(uml) = uml::Uml::find() else {
        return;
    };
    let cwd = Path::new(env!("CARGO_MANIFEST_DIR"));
    let run = uml.run(
        &[],
        cwd,
        "echo hello-from-uml; false",
        Duration::from_secs(60),
    );
    assert_eq!(run.exit_code, Some(1), "{}", run.output);
    assert!(run.output.contains("hello-from-uml"), "{}", run.output);
    let run = uml.run(&[], cwd, "sleep 600", Duration::from_secs(10));
    assert_eq!(run.exit_code, None, "{}", run.output);
    assert!(run.output.contains("UML killed after"), "{}", run.output);
    assert!(
        run.took < Duration::from_secs(30),
        "killed late: {:?}",
        run.took
    );
    // A limit on silence: a guest that prints a line a second outlives it, then is killed
    // once it has printed nothing for that long.
    let ticks = "for i in 1 2 3 4 5 6 7 8 9 10; do echo tick; sleep 1; done; sleep 600";
    let run = uml.run(&[], cwd, ticks, uml::Limit::Silent(Duration::from_secs(5)));
    assert_eq!(run.exit_code, None, "{}", run.output);
    assert_eq!(run.output.matches("tick").count(), 10, "{}", run.output);
    assert!(
        run.output.contains("printed no line for 5s"),
        "{}",
        run.output
    );
    assert!(
        run.took > Duration::from_secs(14) && run.took < Duration::from_secs(45),
        "killed at {:?}, not 5 s after the last tick",
        run.took
    );
    let scratch = Path::new(env!("CARGO_TARGET_TMPDIR")).join("uml");
    let ours = format!("kprs-{}-", std::process::id());
    let left: Vec<_> = std::fs::read_dir(&scratch)
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter(|n| n.starts_with(&ours))
                .collect()
        })
        .unwrap_or_default();
    // The other test of this binary may be mid-run with its own scratch directory.
    assert!(left.len() <= 1, "scratch directories left: {left:?}");
}

/// Writes a dump the guest captured (base64) as a decoder fixture.
fn store_fixture(name: &str, base64: &str) {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(base64)
        .expect("a captured dump in base64");
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src/dataplane/ipvs/backend/netlink/testdata")
        .join(format!("{name}.bin"));
    std::fs::create_dir_all(path.parent().unwrap()).expect("testdata dir");
    std::fs::write(&path, bytes).expect("write fixture");
    println!("stored {}", path.display());
}

/// Set in the guest when the host asked for fixtures.
static CAPTURE: AtomicBool = AtomicBool::new(false);

/// Reports the datagrams of one dump for the host to store as the fixture `name`, when asked.
fn capture(name: &str, dump: impl FnOnce(&mut dyn FnMut(&[u8]))) {
    if !CAPTURE.load(Ordering::Relaxed) {
        return;
    }
    let mut bytes = Vec::new();
    dump(&mut |d| bytes.extend_from_slice(d));
    let text = base64::engine::general_purpose::STANDARD.encode(&bytes);
    println!("{RESULT}capture {name} {text}");
}

/// The entry below, run inside the guest.
const HELPER: HelperProcess = HelperProcess::new("ipvs_netlink_helper_process");

/// Not a test of its own: the cases, run inside the guest. Without the environment variable it
/// does nothing.
#[test]
fn ipvs_netlink_helper_process() {
    HELPER.when_requested(|role| {
        match role {
            "guest" => {}
            "guest-capture" => CAPTURE.store(true, Ordering::Relaxed),
            _ => panic!("unknown role {role}"),
        }
        let cases: [(&str, fn()); 6] = [
            ("ours-to-ipvsadm", ours_to_ipvsadm),
            ("ipvsadm-to-ours", ipvsadm_to_ours),
            ("update-delete", update_delete),
            ("traffic-counters", traffic::traffic_counters),
            ("unknown-scheduler", unknown_scheduler),
            ("pipelined", pipelined::pipelined),
        ];
        for (name, case) in cases {
            let started = Instant::now();
            case();
            println!("{RESULT}{name} took {:?}", started.elapsed());
            println!("{RESULT}{name} ok");
        }
    });
}

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn tcp(a: &str) -> ServiceKey {
    ServiceKey::Address {
        protocol: Protocol::Tcp,
        address: addr(a),
    }
}

fn udp(a: &str) -> ServiceKey {
    ServiceKey::Address {
        protocol: Protocol::Udp,
        address: addr(a),
    }
}

/// A namespace for one case, with a route to the destinations' range: the kernel takes an
/// IPv4 destination only when its address is unicast by the routing table.
fn case_netns(prefix: &str) -> (NetNs, Client) {
    let ns = NetNs::new(prefix);
    ns.output("ip", &["route", "add", "10.20.0.0/16", "dev", "lo"]);
    let client = Client::open(Some(&ns.name)).expect("open the IPVS client");
    (ns, client)
}

/// Lines, each with its runs of spaces made one: `ipvsadm -L` pads its columns.
fn squeezed(text: &str) -> String {
    text.lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect::<Vec<_>>()
        .join("\n")
}

fn sorted_services(client: &mut Client) -> Vec<Service> {
    let mut got: Vec<Service> = client
        .services()
        .expect("list services")
        .into_iter()
        .map(|l| l.service)
        .collect();
    got.sort();
    got
}

fn sorted_destinations(client: &mut Client, key: &ServiceKey) -> Vec<Destination> {
    let mut got: Vec<Destination> = client
        .destinations(key)
        .expect("list destinations")
        .into_iter()
        .map(|l| l.destination)
        .collect();
    got.sort();
    got
}

/// The services and destinations `ours_to_ipvsadm` writes.
fn written() -> Vec<(Service, Vec<Destination>)> {
    let mut wrr_dest = Destination::masquerade(addr("10.20.0.3:5353"), 3);
    wrr_dest.upper_threshold = 100;
    wrr_dest.lower_threshold = 10;
    let mut sh = Service::new(tcp("10.10.0.3:443"), "sh");
    sh.flags = Flags::SH_FALLBACK | Flags::SH_PORT;
    let mut mh = Service::new(tcp("10.10.0.4:80"), "mh");
    mh.flags = Flags::MH_PORT | Flags::PERSISTENT;
    mh.timeout = 600;
    mh.netmask = 0xffff_ff00;
    let mut v6 = Service::new(tcp("[fd00::1]:80"), "rr");
    v6.flags = Flags::PERSISTENT;
    v6.timeout = 10800;
    let sctp = ServiceKey::Address {
        protocol: Protocol::Sctp,
        address: addr("10.10.0.5:3868"),
    };
    let fwm4 = ServiceKey::Fwmark {
        family: IpFamily::V4,
        mark: 42,
    };
    let fwm6 = ServiceKey::Fwmark {
        family: IpFamily::V6,
        mark: 43,
    };
    vec![
        (
            Service::new(tcp("10.10.0.1:80"), "rr"),
            vec![
                Destination::masquerade(addr("10.20.0.1:8080"), 1),
                Destination::masquerade(addr("10.20.0.2:8080"), 1),
            ],
        ),
        (
            Service::new(udp("10.10.0.2:53"), "wrr"),
            vec![wrr_dest, Destination::masquerade(addr("10.20.0.4:5353"), 5)],
        ),
        (sh, vec![]),
        (mh, vec![]),
        (
            v6,
            vec![Destination::masquerade(addr("[fd00:1::2]:8080"), 2)],
        ),
        (Service::new(sctp, "rr"), vec![]),
        (
            Service::new(fwm4, "rr"),
            vec![Destination::masquerade(addr("10.20.0.5:80"), 1)],
        ),
        (Service::new(fwm6, "rr"), vec![]),
    ]
}

fn ours_to_ipvsadm() {
    let (ns, mut client) = case_netns("ipvs-ours");
    let written = written();
    for (service, destinations) in &written {
        client.add_service(service).expect("add service");
        for d in destinations {
            client
                .add_destination(&service.key, d)
                .expect("add destination");
        }
    }
    let timeouts = Timeouts {
        tcp: 900,
        tcp_fin: 120,
        udp: 300,
    };
    client.set_timeouts(&timeouts).expect("set timeouts");

    // ipvsadm's own order: IPv4 services by protocol, then IPv6, then fwmark services. Its
    // save format (1.31) leaves thresholds out; `--thresholds` lists them below.
    let want_saved = "\
-A -t 10.10.0.1:80 -s rr
-a -t 10.10.0.1:80 -r 10.20.0.1:8080 -m -w 1
-a -t 10.10.0.1:80 -r 10.20.0.2:8080 -m -w 1
-A -t 10.10.0.3:443 -s sh -b sh-fallback,sh-port
-A -t 10.10.0.4:80 -s mh -p 600 -M 255.255.255.0 -b mh-port
-A -u 10.10.0.2:53 -s wrr
-a -u 10.10.0.2:53 -r 10.20.0.3:5353 -m -w 3
-a -u 10.10.0.2:53 -r 10.20.0.4:5353 -m -w 5
-A --sctp-service 10.10.0.5:3868 -s rr
-A -t [fd00::1]:80 -s rr -p 10800
-a -t [fd00::1]:80 -r [fd00:1::2]:8080 -m -w 2
-A -f 42 -s rr
-a -f 42 -r 10.20.0.5:80 -m -w 1
-A -f 43 -6 -s rr
";
    assert_eq!(ns.output("ipvsadm", &["-Sn"]), want_saved);
    let want_listed = "\
IP Virtual Server version 1.2.1 (size=4096)
Prot LocalAddress:Port Weight PersistConn ActiveConn InActConn
-> RemoteAddress:Port
TCP 10.10.0.1:80 rr
-> 10.20.0.1:8080 1 0 0 0
-> 10.20.0.2:8080 1 0 0 0
TCP 10.10.0.3:443 sh (sh-fallback,sh-port)
TCP 10.10.0.4:80 mh (mh-port) persistent 600 mask 255.255.255.0
UDP 10.10.0.2:53 wrr
-> 10.20.0.3:5353 3 0 0 0
-> 10.20.0.4:5353 5 0 0 0
SCTP 10.10.0.5:3868 rr
TCP [fd00::1]:80 rr persistent 10800
-> [fd00:1::2]:8080 2 0 0 0
FWM 42 rr
-> 10.20.0.5:80 1 0 0 0
FWM 43 IPv6 rr";
    assert_eq!(
        squeezed(&ns.output("ipvsadm", &["-Ln", "--persistent-conn"])),
        want_listed
    );
    let thresholds = squeezed(&ns.output("ipvsadm", &["-Ln", "--thresholds"]));
    assert!(
        thresholds
            .lines()
            .any(|l| l == "-> 10.20.0.3:5353 100 10 0 0"),
        "upper 100, lower 10:\n{thresholds}"
    );
    assert_eq!(
        ns.output("ipvsadm", &["-Ln", "--timeout"]).trim(),
        "Timeout (tcp tcpfin udp): 900 120 300"
    );

    // And our own dumps give back what was written.
    let mut want: Vec<Service> = written.iter().map(|(s, _)| s.clone()).collect();
    want.sort();
    assert_eq!(sorted_services(&mut client), want);
    for (service, destinations) in &written {
        let mut want = destinations.clone();
        want.sort();
        assert_eq!(
            sorted_destinations(&mut client, &service.key),
            want,
            "{}",
            service.key
        );
    }
    assert_eq!(client.timeouts().expect("read timeouts"), timeouts);
    capture("get_service_dump_ipvs_uml_6.1", |raw| {
        client.services_raw(raw).expect("list services");
    });
    capture("get_dest_dump_wrr_thresholds_ipvs_uml_6.1", |raw| {
        client
            .destinations_raw(&udp("10.10.0.2:53"), raw)
            .expect("list destinations");
    });
}

fn ipvsadm_to_ours() {
    let (ns, mut client) = case_netns("ipvs-theirs");
    ns.output_fed(
        "ipvsadm",
        &["-R"],
        "\
-A -t 10.30.0.1:80 -s wlc -p 300
-a -t 10.30.0.1:80 -r 10.20.0.7:8080 -m -w 4 -x 50 -y 5
-A -u [fd00::30]:53 -s sh -b sh-port
-a -u [fd00::30]:53 -r [fd00:1::7]:53 -m -w 1
-A -f 7 -s mh -b mh-fallback,mh-port
-A --sctp-service 10.30.0.2:9 -s rr -p 60 -M 255.255.0.0
",
    );
    let mut wlc = Service::new(tcp("10.30.0.1:80"), "wlc");
    wlc.flags = Flags::PERSISTENT;
    wlc.timeout = 300;
    let mut sh = Service::new(udp("[fd00::30]:53"), "sh");
    sh.flags = Flags::SH_PORT;
    let mut mh = Service::new(
        ServiceKey::Fwmark {
            family: IpFamily::V4,
            mark: 7,
        },
        "mh",
    );
    mh.flags = Flags::MH_FALLBACK | Flags::MH_PORT;
    let mut sctp = Service::new(
        ServiceKey::Address {
            protocol: Protocol::Sctp,
            address: addr("10.30.0.2:9"),
        },
        "rr",
    );
    sctp.flags = Flags::PERSISTENT;
    sctp.timeout = 60;
    sctp.netmask = 0xffff_0000;
    let mut want = vec![wlc.clone(), sh.clone(), mh, sctp];
    want.sort();
    assert_eq!(sorted_services(&mut client), want);

    let listed = client.destinations(&wlc.key).expect("list destinations");
    assert_eq!(
        listed,
        [ListedDestination {
            destination: Destination {
                upper_threshold: 50,
                lower_threshold: 5,
                ..Destination::masquerade(addr("10.20.0.7:8080"), 4)
            },
            active_connections: 0,
            inactive_connections: 0,
            persistent_connections: 0,
            stats: Default::default(),
        }]
    );
    assert_eq!(
        sorted_destinations(&mut client, &sh.key),
        [Destination::masquerade(addr("[fd00:1::7]:53"), 1)]
    );
}

fn update_delete() {
    let (ns, mut client) = case_netns("ipvs-update");
    let mut service = Service::new(tcp("10.40.0.1:80"), "rr");
    let one = Destination::masquerade(addr("10.20.0.1:80"), 1);
    let two = Destination::masquerade(addr("10.20.0.2:80"), 1);
    client.add_service(&service).expect("add service");
    client.add_destination(&service.key, &one).expect("add one");
    client.add_destination(&service.key, &two).expect("add two");

    let drained = Destination { weight: 0, ..one };
    client
        .update_destination(&service.key, &drained)
        .expect("weight 0");
    service.scheduler = kube_proxy_rs::dataplane::ipvs::backend::netlink::Scheduler::new("wrr");
    service.flags = Flags::PERSISTENT;
    service.timeout = 30;
    client.update_service(&service).expect("change scheduler");
    assert_eq!(
        ns.output("ipvsadm", &["-Sn"]),
        "\
-A -t 10.40.0.1:80 -s wrr -p 30
-a -t 10.40.0.1:80 -r 10.20.0.1:80 -m -w 0
-a -t 10.40.0.1:80 -r 10.20.0.2:80 -m -w 1
"
    );
    assert_eq!(
        sorted_destinations(&mut client, &service.key),
        [drained, two],
        "the update kept both destinations"
    );

    client
        .delete_destination(&service.key, one.address)
        .expect("delete one");
    assert_eq!(sorted_destinations(&mut client, &service.key), [two]);
    let again = client.delete_destination(&service.key, one.address);
    assert_errno(again, 2, "deleting a destination that is gone: ENOENT");
    let twice = client.add_destination(&service.key, &two);
    assert_errno(twice, 17, "adding a destination that is there: EEXIST");
    assert_errno(
        client.add_service(&service),
        17,
        "adding a service that is there: EEXIST",
    );
    let missing = Service::new(tcp("10.40.0.9:80"), "rr");
    assert_errno(
        client.update_service(&missing),
        3,
        "updating a service that is not there: ESRCH",
    );
    // The kernel answers a destination dump of a missing service with an empty dump.
    assert_eq!(
        client.destinations(&missing.key).expect("list"),
        [],
        "a missing service lists no destinations"
    );

    // One service by its key (the outside-change watch's probe): there, with what was set;
    // missing, `None` (the kernel's ESRCH).
    let one_service = client.service(&service.key).expect("get one service");
    assert_eq!(
        one_service.map(|l| (l.service.key, l.service.scheduler, l.service.timeout)),
        Some((service.key, service.scheduler.clone(), 30)),
        "GET_SERVICE of a service that is there"
    );
    assert!(
        client
            .service(&missing.key)
            .expect("get a missing service")
            .is_none(),
        "GET_SERVICE of a service that is not there"
    );

    client.delete_service(&service.key).expect("delete service");
    assert_eq!(ns.output("ipvsadm", &["-Sn"]), "");
    assert!(sorted_services(&mut client).is_empty());
    assert!(
        client
            .service(&service.key)
            .expect("get a deleted service")
            .is_none(),
        "GET_SERVICE after the delete"
    );

    client.add_service(&service).expect("add again");
    client
        .add_service(&Service::new(udp("10.40.0.2:53"), "rr"))
        .expect("add another");
    client.flush().expect("flush");
    assert!(sorted_services(&mut client).is_empty(), "flushed");
}

fn assert_errno(result: Result<(), Error>, errno: i32, what: &str) {
    match result {
        Err(e) => {
            assert_eq!(e.errno(), Some(errno), "{what}: {e}");
            println!("{RESULT}error seen for {what}: {e}");
        }
        Ok(()) => panic!("{what}: the kernel accepted it"),
    }
}

fn unknown_scheduler() {
    let (_ns, mut client) = case_netns("ipvs-sched");
    let service = Service::new(tcp("10.60.0.1:80"), "nosuch");
    let e = client
        .add_service(&service)
        .expect_err("a scheduler the kernel has no module for");
    assert!(
        matches!(&e, Error::UnknownScheduler { scheduler, .. } if scheduler == "nosuch"),
        "{e:?}"
    );
    let text = e.to_string();
    assert!(
        text.contains("\"nosuch\"") && text.contains("TCP 10.60.0.1:80"),
        "{text}"
    );
    println!("{RESULT}error seen: {text}");
    assert!(sorted_services(&mut client).is_empty(), "nothing was added");
}
