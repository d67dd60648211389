//! Support for the eBPF mode's tests (`tests/ebpf_mode.rs`): a cgroup v2 child and a private
//! bpffs instance, each removed on drop (also when a test fails), the client helper run inside
//! the cgroup (and a network namespace), and the proxy binary started beside them.
use std::io::{ErrorKind, Read as _, Write as _};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use kube_proxy_rs::cli::explain::{Explanation, Request, live, render};
use kube_proxy_rs::cluster::{Changes, Snapshot};
use kube_proxy_rs::config::{self, Config, Flags};
use kube_proxy_rs::dataplane::ebpf::backend::{self, Settings};
use kube_proxy_rs::dataplane::ebpf::names;

use crate::relay_pods::host::helper_process::{self, HelperProcess};
use crate::relay_pods::host::{self, NetNs};

/// The test binary's entry that runs [`serve`] when asked.
pub const HELPER: HelperProcess = HelperProcess::new("client_helper");
const TIMEOUT: Duration = Duration::from_secs(3);

/// A cgroup v2 child of the hierarchy's root, removed on drop (its processes have exited by
/// then: every client is run to its end).
pub struct Cgroup(pub PathBuf);

impl Cgroup {
    #[allow(
        clippy::new_without_default,
        reason = "it creates a cgroup: not a value to make by default"
    )]
    pub fn new() -> Cgroup {
        host::require_root();
        let path = backend::default_cgroup().join(unique("kprs-ebpf"));
        std::fs::create_dir(&path).unwrap_or_else(|e| panic!("create {}: {e}", path.display()));
        Cgroup(path)
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir(&self.0) {
            eprintln!("cannot remove cgroup {}: {e}", self.0.display());
        }
    }
}

/// A private bpffs instance on a scratch directory, unmounted on drop: every pin in it goes,
/// so the links are detached and the maps freed whatever the test did.
pub struct BpfFs(pub PathBuf);

impl BpfFs {
    #[allow(
        clippy::new_without_default,
        reason = "it mounts a filesystem: not a value to make by default"
    )]
    pub fn new() -> BpfFs {
        let dir = host::scratch_dir().join(unique("bpffs"));
        std::fs::create_dir_all(&dir).expect("create bpffs mount point");
        host::stdout_of(Command::new("mount").args(["-t", "bpf", "bpf"]).arg(&dir));
        BpfFs(dir)
    }

    pub fn settings(&self, cgroup: &Cgroup) -> Settings {
        Settings {
            cgroup: cgroup.0.clone(),
            pin_root: self.0.join("kube-proxy-rs"),
        }
    }
}

impl Drop for BpfFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
        let _ = std::fs::remove_dir(&self.0);
    }
}

pub fn unique(prefix: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

pub fn pinned_links(settings: &Settings) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(names::links_dir(&settings.pin_root))
        .expect("links dir")
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// The service ports that differ between two snapshots, as the tracker reports them.
pub fn changes(old: &Snapshot, new: &Snapshot) -> Changes {
    let mut c = Changes::default();
    for name in old.ports.keys().chain(new.ports.keys()) {
        if old.ports.get(name) != new.ports.get(name) {
            c.ports.insert(name.clone());
        }
    }
    c
}

/// Runs the client helper doing `work` in `netns`, inside `cgroup` when given (it joins
/// before `ip netns exec`, so before it opens a socket), and returns its result lines.
pub async fn client(netns: &str, cgroup: Option<&Cgroup>, work: &str) -> Vec<String> {
    run_client(Some(netns), cgroup, work).await
}

/// [`client`] in the host's own network namespace (`netns` `None`): for bind() checks only.
/// That is the namespace of this process's main thread (the test body runs on a thread that
/// entered the test's namespace, which a child would inherit), entered with `nsenter`.
pub async fn run_client(netns: Option<&str>, cgroup: Option<&Cgroup>, work: &str) -> Vec<String> {
    let inner = HELPER.in_netns(netns.unwrap_or("-"), work);
    let host = std::ffi::OsString::from(format!("--net=/proc/{}/ns/net", std::process::id()));
    // `ip netns exec NS EXE ARGS…`; on the host, `nsenter --net=… EXE ARGS…`.
    let line: Vec<&std::ffi::OsStr> = match netns {
        Some(_) => std::iter::once(inner.get_program())
            .chain(inner.get_args())
            .collect(),
        None => [std::ffi::OsStr::new("nsenter"), &host]
            .into_iter()
            .chain(inner.get_args().skip(3))
            .collect(),
    };
    let mut cmd = tokio::process::Command::new("sh");
    cmd.arg("-c")
        .arg(r#"if [ -n "$1" ]; then echo $$ > "$1/cgroup.procs" || exit 9; fi; shift; exec "$@""#)
        .arg("sh")
        .arg(cgroup.map(|c| c.0.clone()).unwrap_or_default())
        .args(line);
    for (k, v) in inner.get_envs() {
        if let Some(v) = v {
            cmd.env(k, v);
        }
    }
    let out = tokio::time::timeout(Duration::from_secs(60), cmd.output())
        .await
        .expect("the client finishes")
        .expect("run the client");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "client {work} failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    helper_process::results(&stdout)
        .into_iter()
        .map(str::to_owned)
        .collect()
}

/// The proxy binary in `--proxy-mode ebpf`, in `ns` by `nsenter --net` (not `ip netns exec`,
/// whose private /sys would hide the cgroup hierarchy), with its cgroup and pins the test's.
pub fn proxy(ns: &NetNs, dir: &Path, settings: &Settings) -> host::ChildGuard {
    let mut cmd = Command::new("nsenter");
    cmd.arg(format!("--net=/var/run/netns/{}", ns.name))
        .arg(crate::layout::kube_proxy_rs_binary())
        .args(["--proxy-mode=ebpf", "--hostname-override=node-a", "-v=4"])
        .arg("--manifests")
        .arg(dir)
        .arg("--bpf-cgroup")
        .arg(&settings.cgroup)
        .arg("--bpf-pin-root")
        .arg(&settings.pin_root);
    host::ChildGuard::spawn(&unique("proxy"), &mut cmd)
}

/// Asks the client until `want` is its answer, for up to 20 s.
pub async fn until(netns: &str, cgroup: &Cgroup, work: &str, want: &str, proxy: &host::ChildGuard) {
    for _ in 0..100 {
        if client(netns, Some(cgroup), work).await == [want] {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("never {want}; proxy log:\n{}", proxy.log_tail(30));
}

/// Runs `test` on a current-thread runtime on a thread inside `ns`, so the pods' sockets are
/// the namespace's.
pub fn in_ns<F, Fut>(ns: &NetNs, test: F)
where
    F: FnOnce() -> Fut + Send,
    Fut: std::future::Future<Output = ()>,
{
    kube_proxy_rs::netlink::netns::run_in(Some(&ns.name), || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        runtime.block_on(test());
        Ok(())
    })
    .expect("the test inside the namespace failed (its panic is printed above)");
}

/// The client's work: `kind addr count` items separated by `;`, each connection (or bind)
/// reporting one result line.
pub fn serve(work: &str) {
    for item in work.split(';') {
        let mut parts = item.split_whitespace();
        let (kind, to, n) = (
            parts.next().unwrap(),
            parts.next().unwrap(),
            parts.next().unwrap().parse::<usize>().unwrap(),
        );
        let addr: SocketAddr = to.parse().unwrap();
        if kind == "tcp-during" {
            // Connects one after another for `n` ms; one line: how many, and the failures.
            println!(
                "{}{kind} {to} -> {}",
                helper_process::RESULT,
                connect_for(addr, Duration::from_millis(n as u64))
            );
            continue;
        }
        for _ in 0..n {
            println!(
                "{}{kind} {to} -> {}",
                helper_process::RESULT,
                probe(kind, addr)
            );
        }
    }
}

fn connect_for(to: SocketAddr, run: Duration) -> String {
    let started = std::time::Instant::now();
    let (mut ok, mut failed) = (0, Vec::new());
    while started.elapsed() < run {
        let answer = tcp_probe(to);
        if answer.ends_with(&format!(" peer {to}")) {
            ok += 1;
        } else {
            failed.push(answer);
        }
    }
    format!("{ok} ok, failed: {failed:?}")
}

fn probe(kind: &str, to: SocketAddr) -> String {
    let bound = |r: std::io::Result<()>| match r {
        Ok(()) => "bound".to_owned(),
        Err(e) if e.kind() == ErrorKind::AddrInUse => "in use".to_owned(),
        Err(e) => format!("error {e}"),
    };
    match kind {
        "bind-tcp" => bound(std::net::TcpListener::bind(to).map(drop)),
        "bind-udp" => bound(UdpSocket::bind(to).map(drop)),
        "tcp" | "refused" => tcp_probe(to),
        "udp-connected" => {
            let s = udp_socket(to);
            s.connect(to).expect("udp connect");
            s.send(b"ping").expect("send");
            let mut buf = [0u8; 256];
            let n = s.recv(&mut buf).expect("udp answer");
            let peer = s.peer_addr().expect("peer");
            format!("{} peer {peer}", String::from_utf8_lossy(&buf[..n]))
        }
        "udp-unconnected" => {
            let s = udp_socket(to);
            s.send_to(b"ping", to).expect("send_to");
            let mut buf = [0u8; 256];
            let (n, from) = s.recv_from(&mut buf).expect("udp answer");
            format!("{} from {from}", String::from_utf8_lossy(&buf[..n]))
        }
        other => panic!("unknown probe {other}"),
    }
}

fn udp_socket(to: SocketAddr) -> UdpSocket {
    let any = if to.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" };
    let s = UdpSocket::bind(any).expect("bind");
    s.set_read_timeout(Some(TIMEOUT)).unwrap();
    s
}

fn tcp_probe(to: SocketAddr) -> String {
    let started = std::time::Instant::now();
    match TcpStream::connect_timeout(&to, TIMEOUT) {
        Ok(mut s) => {
            s.set_read_timeout(Some(TIMEOUT)).unwrap();
            let peer = s.peer_addr().expect("peer");
            let mut buf = [0u8; 64];
            let n = s.read(&mut buf).expect("greeting");
            let greeting = String::from_utf8_lossy(&buf[..n]).trim().to_owned();
            let _ = s.write_all(b"x");
            format!("{greeting} peer {peer}")
        }
        Err(e) if e.kind() == ErrorKind::ConnectionRefused => {
            if started.elapsed() < Duration::from_millis(500) {
                "refused at once".to_owned()
            } else {
                format!("refused after {:?}", started.elapsed())
            }
        }
        Err(e) if e.kind() == ErrorKind::NetworkUnreachable => "unreachable".to_owned(),
        Err(e)
            if e.kind() == ErrorKind::TimedOut
                && started.elapsed() < Duration::from_millis(500) =>
        {
            "timed out at once".to_owned()
        }
        Err(e) => format!("error {e}"),
    }
}

/// The resolved configuration of an eBPF-mode proxy on `node-a` pinning under `pin_root`, for
/// `explain` on this node.
pub fn explain_config(pin_root: &Path) -> Config {
    let flags = Flags {
        proxy_mode: Some("ebpf".to_owned()),
        hostname_override: Some("node-a".to_owned()),
        bpf_pin_root: Some(pin_root.to_path_buf()),
        ..Flags::default()
    };
    config::resolve(&flags, None).expect("flags resolve").config
}

/// `explain --to TO --from FROM` on this node, over the pinned maps (printed, as the docs
/// quote it).
pub fn explain(cfg: &Config, snap: &Snapshot, to: &str, from: &str) -> Explanation {
    let request = Request::parse(to, Some(from), None).expect("a request");
    let e = live::explain_on_node(cfg, snap, &request, false).expect("explained");
    println!(
        "$ kube-proxy-rs explain --to {to} --from {from}\n{}",
        render::text(&e)
    );
    e
}
