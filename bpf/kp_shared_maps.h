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

static __always_inline void kp_count(__u32 reason)
{
	__u64 *n = bpf_map_lookup_elem(&kp_stats, &reason);

	if (n)
		*n += 1;
}

#endif
