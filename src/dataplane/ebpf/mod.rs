//! eBPF mode: Services balanced when a socket connects, by cgroup
//! sock_addr programs, so traffic from this node's processes and pods to a Service (ClusterIP,
//! externalIP, LoadBalancer IP, NodePort on a `nodePortAddresses` address or 127.0.0.1) pays no
//! per-packet NAT and leaves no conntrack entry; and packets from outside the node to a
//! NodePort, externalIP or LoadBalancer IP translated per packet by tc programs on the node's
//! interfaces.
//!
//! ```text
//!   cgroup v2 (root by default: every process and pod of the node)
//!     connect4/6  ─┐  {dst, port, proto, scope socket} ─▶ kp_svc ─▶ {set, count, generation}
//!     sendmsg4/6  ─┘  kp_aff (affinity) or a random slot (sendmsg: by socket cookie)
//!                     ─▶ kp_slot ─▶ backend
//!                     rewrite the socket's destination; remember it in kp_rev
//!                     count 0: connect()/sendmsg() fail with ECONNREFUSED (no endpoints), or
//!                     ETIMEDOUT where kube-proxy drops (Local policy, endpoints elsewhere)
//!     recvmsg4/6, getpeername4/6: kp_rev {cookie, backend} ─▶ the Service address
//!     sock_release: a closed connected socket's kp_rev entry goes
//!     post_bind4/6: bind() in the node's namespace to a NodePort (kp_nodeport) ─▶ EADDRINUSE
//!
//!   tc (TCX) on every Ethernet-like interface of the node's namespace (IPv4, IPv6)
//!     ingress: kp_flow {src, dst, ports, proto} hit ─▶ rewrite ─▶ FIB lookup ─▶ redirect
//!              miss: {dst, port, proto, scope external} ─▶ kp_svc
//!                    kp_src (loadBalancerSourceRanges) refuses ─▶ drop
//!                    count 0 ─▶ drop (Local, endpoints elsewhere) or ICMP port unreachable
//!                    random slot ─▶ kp_slot ─▶ backend; SNAT flag (Cluster): source = the
//!                    node address towards the backend; both directions into kp_flow
//!     egress:  kp_flow reply hit without source NAT ─▶ source back to the frontend
//! ```
//!
//! The programs are C (`bpf/kp_sock.c`, `bpf/kp_tc.c`; map layouts in `bpf/kp_maps.h`, the
//! definitions both objects use in `bpf/kp_shared_maps.h`), compiled by clang in build.rs and
//! loaded by aya. Maps and links are pinned under
//! `/sys/fs/bpf/kube-proxy-rs/v1/` ([`names`]); a restart reuses the maps (so `kp_flow` keeps
//! established flows on their backends) and swaps the links.
//!
//! # Parts
//! - [`layout`]: the map structs, mirrored from the C header and checked against it;
//! - [`plan`]: pure, Snapshot → frontends (socket and external scope) and slot sets; names what
//!   this mode does not program;
//! - [`diff`]: pure, (maps, plan) → writes, ordered so a Service's switch is atomic; whole, or
//!   for the changed service ports only against the contents it keeps ([`diff::Held`]);
//! - [`render`]: the plan as `plan --proxy-mode ebpf` prints it;
//! - [`backend`]: load, attach, pin, read and write the maps; `--cleanup`'s removal;
//! - [`tc`]: which interfaces get the tc programs, and attaching them;
//! - [`apply`]: [`EbpfDataplane`], the `Dataplane` for `--proxy-mode ebpf`;
//! - [`stats`]: the datapath counters and map fill levels the metrics read;
//! - [`trace`]: pure, (maps, a socket call) → what the programs do with it; backs `explain`;
//! - [`udp_sockets`]: connected UDP sockets to a removed backend, destroyed after syncs.
//!
//! ClientIP affinity is per network namespace for sockets (`kp_aff`, keyed by its cookie): the
//! address is not known at connect() time, and a pod is a namespace of its own; per client
//! address for traffic from outside (the same map, keyed by a hash of the address).
//!
//! # What is left (see `docs/operations.md`)
//! IPv4 options and fragments and IPv6 extension headers from outside; flows from outside age out only by LRU eviction (no TCP state, no
//! timeouts); UDP without endpoints from the node's processes gets ECONNREFUSED from
//! connect()/sendmsg() instead of an ICMP error; SCTP. NodePort bind protection assumes the node's
//! namespace is the initial one (true for a DaemonSet with hostNetwork, not for the lab's
//! namespace "nodes", where it guards nothing).

pub mod apply;
pub mod backend;
pub mod diff;
mod fuzz;
pub mod inspect;
pub mod layout;
pub mod mode;
pub mod names;
pub mod plan;
pub mod render;
pub mod stats;
pub mod tc;
pub mod trace;
pub mod udp_sockets;

pub use apply::EbpfDataplane;
