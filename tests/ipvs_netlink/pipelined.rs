//! The `pipelined` case: many requests per datagram (see `ipvs_netlink.rs`).

use super::*;

/// Many requests per datagram: 300 services with two destinations each (900 requests, four
/// datagrams) land as `ipvsadm -Sn` lists them; a refused request in the middle is reported
/// with its errno, every request the kernel took is reported as accepted, and nothing after
/// the refused one's datagram is sent.
pub(super) fn pipelined() {
    use kube_proxy_rs::dataplane::ipvs::backend::netlink::{PER_DATAGRAM, Request};
    let (ns, mut client) = case_netns("ipvs-pipe");
    let mut requests = Vec::new();
    for i in 0..300u32 {
        let key = tcp(&format!("10.50.{}.{}:80", i / 250, i % 250 + 1));
        requests.push(Request::NewService(Service::new(key, "rr")));
        for d in 1..=2 {
            let dest = Destination::masquerade(addr(&format!("10.20.{}.{d}:8080", i % 250)), 1);
            requests.push(Request::NewDest(key, dest));
        }
    }
    assert!(requests.len() > 3 * PER_DATAGRAM);
    let mut accepted = Vec::new();
    let started = Instant::now();
    client
        .send_all(&requests, &mut |i| accepted.push(i))
        .expect("every request taken");
    println!(
        "{RESULT}pipelined {} requests in {:?}",
        requests.len(),
        started.elapsed()
    );
    assert_eq!(accepted, (0..requests.len()).collect::<Vec<_>>());
    let saved = ns.output("ipvsadm", &["-Sn"]);
    assert_eq!(saved.lines().count(), 900, "{saved}");
    assert!(
        saved.contains("-a -t 10.50.1.50:80 -r 10.20.49.2:8080 -m -w 1"),
        "{saved}"
    );

    // The same requests one per round trip, for the record (printed, never asserted).
    client.flush().expect("flush");
    let started = Instant::now();
    for r in &requests {
        client.send(r).expect("one by one");
    }
    println!(
        "{RESULT}one by one {} requests in {:?}",
        requests.len(),
        started.elapsed()
    );

    // A duplicate in the second datagram: refused (EEXIST); the rest of that datagram is taken;
    // the third datagram is not sent.
    client.flush().expect("flush");
    let mut again = requests.clone();
    again.insert(PER_DATAGRAM + 10, requests[0].clone());
    let mut accepted = Vec::new();
    let err = client
        .send_all(&again, &mut |i| accepted.push(i))
        .expect_err("a duplicate service");
    assert_eq!(err.errno(), Some(17), "{err}");
    let refused = PER_DATAGRAM + 10;
    let want: Vec<usize> = (0..2 * PER_DATAGRAM).filter(|i| *i != refused).collect();
    assert_eq!(
        accepted, want,
        "all but the refused one, up to its datagram's end"
    );
    let listed = ns.output("ipvsadm", &["-Sn"]).lines().count();
    assert_eq!(
        listed,
        2 * PER_DATAGRAM - 1,
        "nothing of the third datagram"
    );
    client.flush().expect("flush");
}
