/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The maps kube-proxy-rs's eBPF mode shares between its BPF programs (kp_sock.c) and the
 * proxy (src/dataplane/ebpf/layout.rs mirrors every struct here, field for field).
 *
 * Addresses are 16 bytes in network order for both families: an IPv4 address is stored
 * IPv4-mapped (::ffff:a.b.c.d), so one set of maps serves connect4 and connect6, and an
 * AF_INET6 socket connecting to ::ffff:<ClusterIP> finds the IPv4 Service. Ports are in
 * network order, as the sock_addr context holds them.
 *
 * A layout change must bump KP_LAYOUT_VERSION: the maps are pinned under a directory named
 * after it, and an old proxy's pinned maps are never read with a new layout.
 */
#ifndef KP_MAPS_H
#define KP_MAPS_H

#include <linux/types.h>

#define KP_LAYOUT_VERSION 1

/* Upper bounds. kp_svc and kp_slot are not preallocated, so only entries in use take memory;
 * kp_rev is an LRU (preallocated by the kernel): about 100 bytes an entry. */
#define KP_MAX_SERVICES 262144
#define KP_MAX_SLOTS 1048576
#define KP_MAX_REVERSE 65536
#define KP_MAX_AFFINITY 65536
#define KP_MAX_NODEPORTS 65536
/* kp_flow holds two entries per flow from outside (request and reply direction); LRU,
 * preallocated: about 150 bytes an entry. */
#define KP_MAX_FLOWS 131072
#define KP_MAX_SOURCE_RANGES 65536
/* An affinity entry whose generation is old is looked up among at most this many slots. */
#define KP_AFFINITY_SCAN 64

/* kp_stats: one per-CPU __u64 counter per reason (src/dataplane/ebpf/stats.rs names them). */
enum kp_stat {
	KP_STAT_TRANSLATED = 0, /* connect()/sendmsg() to a frontend given a backend */
	KP_STAT_REFUSED = 1,    /* connect()/sendmsg() to a frontend without endpoints */
	KP_STAT_AFFINE = 2,     /* of the translated: to the backend affinity remembered */
	KP_STAT_REVERSED = 3,   /* recvmsg()/getpeername() shown the Service address */
	KP_STAT_BIND_REFUSED = 4, /* bind() of the node's network namespace to a NodePort */
	KP_STAT_DROPPED = 5,    /* connect()/sendmsg() to a frontend whose policy drops */
	KP_STAT_NAT_EXHAUSTED = 6, /* tc: a new flow dropped, no free source port for its SNAT */
	KP_STAT_COUNT = 7,
};
/* src/dataplane/ebpf/stats.rs: REASONS has as many names, in this order. */
_Static_assert(KP_STAT_COUNT == 7, "kp_stat count");

/* kp_svc_val.flags */
#define KP_SVC_F_NONE 0
/* ClientIP affinity: a network namespace keeps its backend for affinity_timeout seconds after
 * its last connection (socket programs cannot see the client address yet; pods each have a
 * network namespace of their own, processes of the node share one). */
#define KP_SVC_F_AFFINITY 1
/* With count 0: endpoints exist, but none this traffic may use (a Local policy, endpoints on
 * other nodes). kube-proxy drops such packets, so the client times out; here connect() and
 * sendmsg() fail at once with ETIMEDOUT, which clients report as a timeout (no ECONNREFUSED). */
#define KP_SVC_F_DROP 2
/* Scope external: the packets of a new flow leave with the node's address as their source
 * (externalTrafficPolicy Cluster), so the backend's replies come back through this node. */
#define KP_SVC_F_SNAT 4
/* Scope socket: the frontend's twin of scope external has loadBalancerSourceRanges. A socket
 * translated through it remembers the frontend (kp_restrict), and the cgroup egress program
 * drops its packets whose source is outside the ranges, as kube-proxy drops such traffic from
 * the node and its pods. */
#define KP_SVC_F_RESTRICTED 8

/* A frontend: a Service address, port and protocol (IPPROTO_TCP, IPPROTO_UDP), and which
 * programs look it up (scope): the socket programs (KP_SCOPE_SOCKET, traffic of this node's
 * processes and pods) or the tc programs (KP_SCOPE_EXTERNAL, packets from outside the node).
 * The two differ where a traffic policy does: externalTrafficPolicy Local applies to packets
 * from outside only. */
struct kp_svc_key {
	__u32 addr[4];
	__be16 port;
	__u8 proto;
	__u8 scope;
};

#define KP_SCOPE_SOCKET 0
#define KP_SCOPE_EXTERNAL 1

/* The port of a ClusterIP's entry that stands for every port its Service does not define
 * (count 0: refused). The programs look it up when the port itself has no entry. */
#define KP_UNDEFINED_PORT 0

/*
 * What a frontend is balanced over: the slots (svc_id, generation, 0..count-1). count 0 means the
 * Service port has no endpoint for this traffic: connect() and sendmsg() fail with
 * ECONNREFUSED. generation is the generation of the slot set in use; the proxy writes a new set
 * under the other generation and then flips generation and count in one update of this entry, so
 * a reader never mixes old and new backends.
 */
struct kp_svc_val {
	__u32 svc_id;
	__u16 count;
	__u8 flags;
	__u8 generation;
	__u32 affinity_timeout;
};

/* One backend of a slot set. */
struct kp_slot_key {
	__u32 svc_id;
	__u16 slot;
	__u8 generation;
	__u8 pad;
};

struct kp_backend {
	__u32 addr[4];
	__be16 port;
	__u16 pad;
};

/*
 * The reverse translation of a socket: (socket cookie, backend) -> the Service address it
 * was translated from. recvmsg reports the Service as a datagram's source; getpeername
 * reports it as the peer. LRU: entries of closed sockets age out.
 */
struct kp_rev_key {
	__u64 cookie;
	__u32 addr[4];
	__be16 port;
	__u16 pad;
	__u32 pad2;
};

struct kp_rev_val {
	__u32 addr[4];
	__be16 port;
	__u16 pad;
};

/* The backend a network namespace (socket programs) or a client address from outside (tc
 * programs: a hash of the address with the top bit set, which no cookie has) was last given
 * for a slot set (affinity). LRU. */
struct kp_aff_key {
	__u64 netns_cookie;
	__u32 svc_id;
	__u32 pad;
};

struct kp_aff_val {
	__u64 last_used_ns;
	__u32 addr[4];
	__be16 port;
	__u16 slot;
	__u8 generation;
	__u8 pad[3];
};

/* A NodePort: bind() to it in the node's network namespace fails with EADDRINUSE (post_bind),
 * so no process of the node takes a port Services answer on. The port is in host order, as
 * struct bpf_sock's src_port. Value: unused (__u8). */
struct kp_np_key {
	__u16 port;
	__u8 proto;
	__u8 pad;
};

/*
 * The tc programs' connection tracking (kp_tc.c): a packet's addresses and ports as it arrives
 * -> what to rewrite them to. A flow from outside has two entries: its request direction
 * (client -> frontend becomes client or node address -> backend) and its reply direction
 * (backend -> client or node address becomes frontend -> client). Written by the programs
 * only; LRU, so flows nobody uses any more age out. IPv4 addresses are stored mapped, as in
 * kp_svc.
 */
struct kp_flow_key {
	__u32 saddr[4];
	__u32 daddr[4];
	__be16 sport;
	__be16 dport;
	__u8 proto;
	__u8 pad[3];
};

struct kp_flow_val {
	__u32 saddr[4];
	__u32 daddr[4];
	__be16 sport;
	__be16 dport;
	__u8 flags; /* KP_FLOW_F_* */
	/* Request direction: the frontend's slot generation the backend was last seen in. */
	__u8 generation;
	__u8 pad[2];
};

/* The entry of a reply direction (backend -> client). */
#define KP_FLOW_F_REPLY 1
/* The flow's source was rewritten to the node's address. */
#define KP_FLOW_F_SNAT 2

/*
 * loadBalancerSourceRanges (LPM trie): a frontend (scope external) with the prefix length 160
 * (its address, port and protocol only) and value 0 marks a frontend whose sources are
 * restricted; each range is the frontend plus a source prefix (160 + 96 + the IPv4 prefix
 * length, or 160 + the IPv6 one) with value 1. The longest match for a packet's frontend and
 * source is then 1 (allowed), 0 (restricted, not in a range: dropped) or nothing (no ranges).
 */
struct kp_src_key {
	__u32 prefixlen;
	__u32 fe_addr[4];
	__be16 fe_port;
	__u8 fe_proto;
	__u8 pad;
	__u32 src[4];
};

#define KP_SRC_FRONTEND_BITS 160

/* The numbers src/dataplane/ebpf/layout.rs asserts too, so the two cannot drift. */
#define KP_ASSERT_LAYOUT(type, size) _Static_assert(sizeof(struct type) == (size), #type " size")
#define KP_ASSERT_OFFSET(type, field, off)                                                       \
	_Static_assert(__builtin_offsetof(struct type, field) == (off), #type "." #field " offset")

KP_ASSERT_LAYOUT(kp_svc_key, 20);
KP_ASSERT_OFFSET(kp_svc_key, port, 16);
KP_ASSERT_OFFSET(kp_svc_key, proto, 18);
KP_ASSERT_OFFSET(kp_svc_key, scope, 19);
KP_ASSERT_LAYOUT(kp_svc_val, 12);
KP_ASSERT_OFFSET(kp_svc_val, count, 4);
KP_ASSERT_OFFSET(kp_svc_val, flags, 6);
KP_ASSERT_OFFSET(kp_svc_val, generation, 7);
KP_ASSERT_OFFSET(kp_svc_val, affinity_timeout, 8);
KP_ASSERT_LAYOUT(kp_slot_key, 8);
KP_ASSERT_OFFSET(kp_slot_key, slot, 4);
KP_ASSERT_OFFSET(kp_slot_key, generation, 6);
KP_ASSERT_LAYOUT(kp_backend, 20);
KP_ASSERT_OFFSET(kp_backend, port, 16);
KP_ASSERT_LAYOUT(kp_rev_key, 32);
KP_ASSERT_OFFSET(kp_rev_key, addr, 8);
KP_ASSERT_OFFSET(kp_rev_key, port, 24);
KP_ASSERT_LAYOUT(kp_rev_val, 20);
KP_ASSERT_OFFSET(kp_rev_val, port, 16);
KP_ASSERT_LAYOUT(kp_np_key, 4);
KP_ASSERT_OFFSET(kp_np_key, proto, 2);
KP_ASSERT_LAYOUT(kp_aff_key, 16);
KP_ASSERT_OFFSET(kp_aff_key, svc_id, 8);
KP_ASSERT_LAYOUT(kp_aff_val, 32);
KP_ASSERT_OFFSET(kp_aff_val, addr, 8);
KP_ASSERT_OFFSET(kp_aff_val, port, 24);
KP_ASSERT_OFFSET(kp_aff_val, slot, 26);
KP_ASSERT_OFFSET(kp_aff_val, generation, 28);
KP_ASSERT_LAYOUT(kp_flow_key, 40);
KP_ASSERT_OFFSET(kp_flow_key, daddr, 16);
KP_ASSERT_OFFSET(kp_flow_key, sport, 32);
KP_ASSERT_OFFSET(kp_flow_key, proto, 36);
KP_ASSERT_LAYOUT(kp_flow_val, 40);
KP_ASSERT_OFFSET(kp_flow_val, flags, 36);
KP_ASSERT_OFFSET(kp_flow_val, generation, 37);
KP_ASSERT_LAYOUT(kp_src_key, 40);
KP_ASSERT_OFFSET(kp_src_key, fe_addr, 4);
KP_ASSERT_OFFSET(kp_src_key, fe_port, 20);
KP_ASSERT_OFFSET(kp_src_key, fe_proto, 22);
KP_ASSERT_OFFSET(kp_src_key, src, 24);

#endif
