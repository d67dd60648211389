/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The maps both program objects use (kp_sock.c and kp_tc.c), defined once: each object loads
 * its own definition and the loader reuses the pinned map by name, which works only when the
 * definitions agree. Also the counter helper both use.
 */
#ifndef KP_SHARED_MAPS_H
#define KP_SHARED_MAPS_H

#include "kp_maps.h"

/* Frontends -> slot sets. No preallocation: a replaced entry is freed after an RCU grace
 * period, so a program that has just looked one up never reads a recycled element. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, KP_MAX_SERVICES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct kp_svc_key);
	__type(value, struct kp_svc_val);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} kp_svc SEC(".maps");

/* (svc_id, generation, slot) -> backend. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, KP_MAX_SLOTS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct kp_slot_key);
	__type(value, struct kp_backend);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} kp_slot SEC(".maps");

/* ClientIP affinity: (network namespace, slot set) -> the backend it was given for sockets;
 * clients from outside are keyed by a hash of their address with the top bit set, which no
 * network namespace cookie has. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, KP_MAX_AFFINITY);
	__type(key, struct kp_aff_key);
	__type(value, struct kp_aff_val);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} kp_aff SEC(".maps");

/* Per-reason counters (enum kp_stat), summed over CPUs by the proxy at each scrape. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, KP_STAT_COUNT);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} kp_stats SEC(".maps");

/* loadBalancerSourceRanges (kp_maps.h, struct kp_src_key); written by the proxy. The tc
 * programs check packets from outside; the socket programs mark a socket that connects to a
 * restricted LoadBalancer IP, whose packets the cgroup egress program checks. */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, KP_MAX_SOURCE_RANGES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct kp_src_key);
	__type(value, __u8);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} kp_src SEC(".maps");

/* 1 when `src` (16 bytes, IPv4 mapped) may use the frontend `key` of scope external: it has
 * no ranges, or one of them holds `src`. */
static __always_inline int kp_source_in_ranges(const struct kp_svc_key *key, const __u32 src[4])
{
	struct kp_src_key k = {};
	__u8 *v;

	k.prefixlen = KP_SRC_FRONTEND_BITS + 128;
	k.fe_addr[0] = key->addr[0];
	k.fe_addr[1] = key->addr[1];
	k.fe_addr[2] = key->addr[2];
	k.fe_addr[3] = key->addr[3];
	k.fe_port = key->port;
	k.fe_proto = key->proto;
	k.src[0] = src[0];
	k.src[1] = src[1];
	k.src[2] = src[2];
	k.src[3] = src[3];
	v = bpf_map_lookup_elem(&kp_src, &k);
	return !v || *v;
}

static __always_inline void kp_count(__u32 reason)
{
	__u64 *n = bpf_map_lookup_elem(&kp_stats, &reason);

	if (n)
		*n += 1;
}

#endif
