// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Per-packet Service load balancing for traffic from outside the node: tc programs on every
 * Ethernet-like interface of the node's namespace (clients come in on those carrying its
 * addresses; replies come back on the backend's way). kp_tc_ingress translates a new flow to a
 * frontend of scope external (a NodePort on a node address, an externalIP, a LoadBalancer IP)
 * to a backend of the frontend's slot set (the same kp_svc/kp_slot the socket programs read,
 * under the same generation switch), rewrites the source to the node's address when the
 * frontend says so (externalTrafficPolicy Cluster), records both directions in kp_flow, and
 * rewrites every later packet of the flow, and its replies, from there. kp_tc_egress reverses
 * replies that leave through an interface without having entered through one of ours (an
 * interface that came up after the last sync), when no source NAT was involved.
 *
 * Forwarding: a rewritten packet is sent on by the program itself (bpf_fib_lookup, then
 * bpf_redirect, or bpf_redirect_neigh when the neighbour is not resolved yet), not handed back
 * to the kernel's input path: after source NAT its source is a node address (and a reply's
 * source is the frontend, a node address for NodePorts), which the kernel's input path drops
 * as a martian source.
 *
 * IPv4 and IPv6 (IPv4 stored IPv4-mapped in the maps, as the socket programs do); IPv4
 * packets with options or fragments and IPv6 packets with extension headers pass untouched.
 */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "kp_shared_maps.h"

/* Flows from outside, both directions. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, KP_MAX_FLOWS);
	__type(key, struct kp_flow_key);
	__type(value, struct kp_flow_val);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} kp_flow SEC(".maps");

#define KP_IPPROTO_TCP 6
#define KP_IPPROTO_UDP 17
#define KP_IPPROTO_ICMP 1
#define KP_ETH_LEN 14
#define KP_IP_LEN 20
#define KP_IP_OFF KP_ETH_LEN
#define KP_IP_CSUM (KP_IP_OFF + 10)
#define KP_IP_SRC (KP_IP_OFF + 12)
#define KP_IP_DST (KP_IP_OFF + 16)
#define KP_L4_OFF (KP_IP_OFF + KP_IP_LEN)
#define KP_IP6_LEN 40
#define KP_IP6_SRC (KP_IP_OFF + 8)
#define KP_IP6_DST (KP_IP_OFF + 24)
#define KP_L4_OFF6 (KP_IP_OFF + KP_IP6_LEN)
#define KP_IPPROTO_ICMPV6 58
/* Source ports tried for a source-NATed flow when the client's own is taken. */
#define KP_NAT_PORT_MIN 32768
#define KP_NAT_PORT_SPAN 28232
#define KP_NAT_TRIES 8

/* One TCP or UDP packet's addresses (IPv4 mapped) and ports, in network order. */
struct kp_pkt {
	__u32 saddr[4];
	__u32 daddr[4];
	__be16 sport;
	__be16 dport;
	__u8 proto;
	__u8 v6;
	__u32 l4; /* offset of the L4 header */
};

static __always_inline void kp_map4(__u32 out[4], __be32 a)
{
	out[0] = 0;
	out[1] = 0;
	out[2] = bpf_htonl(0xffff);
	out[3] = a;
}

/* 0 when the packet is not one this program translates. */
static __always_inline int kp_parse(struct __sk_buff *skb, struct kp_pkt *p)
{
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = data + KP_ETH_LEN;
	struct ipv6hdr *ip6 = data + KP_ETH_LEN;
	__be16 *ports = data + KP_L4_OFF;
	__be16 *ports6 = data + KP_L4_OFF6;

	if ((void *)(eth + 1) > end)
		return 0;
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		if ((void *)(ports + 2) > end)
			return 0;
		if (ip->ihl != 5 || (ip->frag_off & bpf_htons(0x3fff)))
			return 0;
		if (ip->protocol != KP_IPPROTO_TCP && ip->protocol != KP_IPPROTO_UDP)
			return 0;
		kp_map4(p->saddr, ip->saddr);
		kp_map4(p->daddr, ip->daddr);
		p->proto = ip->protocol;
		p->sport = ports[0];
		p->dport = ports[1];
		p->l4 = KP_L4_OFF;
		return 1;
	}
	if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		if ((void *)(ports6 + 2) > end)
			return 0;
		if (ip6->nexthdr != KP_IPPROTO_TCP && ip6->nexthdr != KP_IPPROTO_UDP)
			return 0;
		__builtin_memcpy(p->saddr, &ip6->saddr, 16);
		__builtin_memcpy(p->daddr, &ip6->daddr, 16);
		p->proto = ip6->nexthdr;
		p->sport = ports6[0];
		p->dport = ports6[1];
		p->v6 = 1;
		p->l4 = KP_L4_OFF6;
		return 1;
	}
	return 0;
}

static __always_inline int kp_same_addr(const __u32 a[4], const __u32 b[4])
{
	return a[0] == b[0] && a[1] == b[1] && a[2] == b[2] && a[3] == b[3];
}

static __always_inline void kp_flow_of(struct kp_flow_key *k, const struct kp_pkt *p)
{
	__builtin_memcpy(k->saddr, p->saddr, 16);
	__builtin_memcpy(k->daddr, p->daddr, 16);
	k->sport = p->sport;
	k->dport = p->dport;
	k->proto = p->proto;
}

/* Rewrites the packet's addresses and ports to `to`'s, with incremental checksum updates
 * (the L4 checksum covers the addresses through the pseudo header). */
/* IPv6 has no header checksum: an address change only moves the L4 checksum (by the
 * difference of the two 16-byte addresses). */
static __always_inline int kp_rewrite6_addr(struct __sk_buff *skb, __u32 l4_csum, __u64 flags,
					    __u32 off, __u32 old[4], __u32 new[4])
{
	__s64 diff = bpf_csum_diff(old, 16, new, 16, 0);

	if (diff < 0 || bpf_l4_csum_replace(skb, l4_csum, 0, (__u32)diff, flags) ||
	    bpf_skb_store_bytes(skb, off, new, 16, 0))
		return -1;
	return 0;
}

static __attribute__((noinline)) int kp_rewrite(struct __sk_buff *skb, const struct kp_pkt *p,
						const struct kp_flow_val *to)
{
	__u32 l4 = p->v6 ? KP_L4_OFF6 : KP_L4_OFF;
	__u32 l4_csum = p->proto == KP_IPPROTO_TCP ? l4 + 16 : l4 + 6;
	__u64 pseudo = BPF_F_PSEUDO_HDR | sizeof(__be32);
	__u64 port_flags = sizeof(__be16);
	__u32 old[4], new[4];
	__be32 saddr = to->saddr[3], daddr = to->daddr[3];

	if (p->proto == KP_IPPROTO_UDP) {
		/* A UDP checksum of 0 means none: keep it so. */
		pseudo |= BPF_F_MARK_MANGLED_0;
		port_flags |= BPF_F_MARK_MANGLED_0;
	}
	if (p->v6) {
		if (!kp_same_addr(to->saddr, p->saddr)) {
			__builtin_memcpy(old, p->saddr, 16);
			__builtin_memcpy(new, to->saddr, 16);
			if (kp_rewrite6_addr(skb, l4_csum, BPF_F_PSEUDO_HDR | (pseudo & BPF_F_MARK_MANGLED_0),
					     KP_IP6_SRC, old, new))
				return -1;
		}
		if (!kp_same_addr(to->daddr, p->daddr)) {
			__builtin_memcpy(old, p->daddr, 16);
			__builtin_memcpy(new, to->daddr, 16);
			if (kp_rewrite6_addr(skb, l4_csum, BPF_F_PSEUDO_HDR | (pseudo & BPF_F_MARK_MANGLED_0),
					     KP_IP6_DST, old, new))
				return -1;
		}
	} else {
		if (saddr != p->saddr[3]) {
			if (bpf_l4_csum_replace(skb, l4_csum, p->saddr[3], saddr, pseudo) ||
			    bpf_l3_csum_replace(skb, KP_IP_CSUM, p->saddr[3], saddr, sizeof(__be32)) ||
			    bpf_skb_store_bytes(skb, KP_IP_SRC, &saddr, sizeof(saddr), 0))
				return -1;
		}
		if (daddr != p->daddr[3]) {
			if (bpf_l4_csum_replace(skb, l4_csum, p->daddr[3], daddr, pseudo) ||
			    bpf_l3_csum_replace(skb, KP_IP_CSUM, p->daddr[3], daddr, sizeof(__be32)) ||
			    bpf_skb_store_bytes(skb, KP_IP_DST, &daddr, sizeof(daddr), 0))
				return -1;
		}
	}
	if (to->sport != p->sport) {
		if (bpf_l4_csum_replace(skb, l4_csum, p->sport, to->sport, port_flags) ||
		    bpf_skb_store_bytes(skb, l4, &to->sport, sizeof(__be16), 0))
			return -1;
	}
	if (to->dport != p->dport) {
		if (bpf_l4_csum_replace(skb, l4_csum, p->dport, to->dport, port_flags) ||
		    bpf_skb_store_bytes(skb, l4 + 2, &to->dport, sizeof(__be16), 0))
			return -1;
	}
	return 0;
}

/* Sends a rewritten packet on towards its (new) destination, as the kernel would forward it:
 * route lookup, TTL decrement, then out of the route's interface. Returns the tc verdict. */
/* The same, for IPv6: hop limit instead of TTL, no header checksum. */
static __always_inline int kp_forward6(struct __sk_buff *skb)
{
	struct bpf_fib_lookup fib = {};
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	struct ipv6hdr *ip6 = data + KP_ETH_LEN;
	long rc;

	if ((void *)(ip6 + 1) > end)
		return TC_ACT_SHOT;
	if (ip6->hop_limit <= 1)
		return TC_ACT_OK;
	fib.family = 10; /* AF_INET6 */
	fib.l4_protocol = ip6->nexthdr;
	fib.tot_len = bpf_ntohs(ip6->payload_len) + KP_IP6_LEN;
	__builtin_memcpy(fib.ipv6_src, &ip6->saddr, 16);
	__builtin_memcpy(fib.ipv6_dst, &ip6->daddr, 16);
	fib.ifindex = skb->ingress_ifindex;
	rc = bpf_fib_lookup(skb, &fib, sizeof(fib), 0);
	if (rc != BPF_FIB_LKUP_RET_SUCCESS && rc != BPF_FIB_LKUP_RET_NO_NEIGH)
		return TC_ACT_OK;
	ip6->hop_limit--;
	if (rc == BPF_FIB_LKUP_RET_NO_NEIGH)
		return bpf_redirect_neigh(fib.ifindex, 0, 0, 0);
	__builtin_memcpy(eth->h_dest, fib.dmac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, fib.smac, ETH_ALEN);
	return bpf_redirect(fib.ifindex, 0);
}

static __attribute__((noinline)) int kp_forward(struct __sk_buff *skb, const struct kp_pkt *p)
{
	struct bpf_fib_lookup fib = {};
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = data + KP_ETH_LEN;
	__be16 old_word, new_word;
	long rc;

	if (p->v6)
		return kp_forward6(skb);
	if ((void *)(ip + 1) > end)
		return TC_ACT_SHOT;
	if (ip->ttl <= 1)
		return TC_ACT_OK; /* the kernel answers with time exceeded */
	fib.family = 2; /* AF_INET */
	fib.tos = ip->tos;
	fib.l4_protocol = ip->protocol;
	fib.tot_len = bpf_ntohs(ip->tot_len);
	fib.ipv4_src = ip->saddr;
	fib.ipv4_dst = ip->daddr;
	fib.ifindex = skb->ingress_ifindex;
	rc = bpf_fib_lookup(skb, &fib, sizeof(fib), 0);
	if (rc != BPF_FIB_LKUP_RET_SUCCESS && rc != BPF_FIB_LKUP_RET_NO_NEIGH)
		return TC_ACT_OK;

	old_word = *(__be16 *)&ip->ttl;
	ip->ttl--;
	new_word = *(__be16 *)&ip->ttl;
	bpf_l3_csum_replace(skb, KP_IP_CSUM, old_word, new_word, sizeof(__be16));
	if (rc == BPF_FIB_LKUP_RET_NO_NEIGH)
		return bpf_redirect_neigh(fib.ifindex, 0, 0, 0);
	data = (void *)(long)skb->data;
	end = (void *)(long)skb->data_end;
	eth = data;
	if ((void *)(eth + 1) > end)
		return TC_ACT_SHOT;
	__builtin_memcpy(eth->h_dest, fib.dmac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, fib.smac, ETH_ALEN);
	return bpf_redirect(fib.ifindex, 0);
}

static __always_inline __u16 kp_fold(__s64 sum)
{
	__u64 s = (__u64)sum;

	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return (__u16)~s;
}

/*
 * Refuses the packet as kube-proxy's reject does: an ICMP port unreachable to its source,
 * quoting its IP header and its L4 header (UDP: 8 bytes; TCP: the whole header with options,
 * at most 60 bytes), sent back out of the interface it came in on (TCP clients see
 * ECONNREFUSED, UDP clients an error on the socket). The packet itself becomes the reply: 28
 * bytes (new IP header and ICMP header) are opened after its IP header, and what follows the
 * quoted bytes is cut. The whole L4 header is quoted because a packet from a local sender
 * over a veth may still carry checksum offload state pointing at its L4 checksum field; cut
 * shorter, the kernel would drop the reply.
 */
/* Not inlined (nor kp_reject6, kp_new_flow, kp_still_served): a function of its own has a
 * stack frame of its own, and together they would not fit in the ingress program's 512 bytes
 * (the verifier counts the deepest chain of calls, not their sum). */
static __attribute__((noinline)) int kp_reject4(struct __sk_buff *skb, const struct kp_pkt *p)
{
	struct {
		struct iphdr ip;
		__u8 icmp[8];
		__u8 orig[KP_IP_LEN + 60];
	} r = {};
	__u8 macs[12], swapped[12];
	__u32 quote = 8, len;
	__u8 doff;
	int i;

	if (p->proto == KP_IPPROTO_TCP) {
		if (bpf_skb_load_bytes(skb, KP_L4_OFF + 12, &doff, 1))
			return TC_ACT_SHOT;
		quote = (__u32)(doff >> 4) * 4;
	}
	if (skb->len < KP_L4_OFF + quote)
		quote = 8;
	quote &= 0x3c;
	if (quote < 8)
		quote = 8;
	len = KP_IP_LEN + 8 + KP_IP_LEN + quote;
	if (bpf_skb_load_bytes(skb, 0, macs, sizeof(macs)) ||
	    bpf_skb_load_bytes(skb, KP_IP_OFF, r.orig, KP_IP_LEN + quote))
		return TC_ACT_SHOT;
	if (bpf_skb_adjust_room(skb, KP_IP_LEN + 8, BPF_ADJ_ROOM_NET, 0) ||
	    bpf_skb_change_tail(skb, KP_ETH_LEN + len, 0))
		return TC_ACT_SHOT;
	r.ip.version = 4;
	r.ip.ihl = 5;
	r.ip.tot_len = bpf_htons(len);
	r.ip.ttl = 64;
	r.ip.protocol = KP_IPPROTO_ICMP;
	r.ip.saddr = p->daddr[3];
	r.ip.daddr = p->saddr[3];
	r.ip.check = kp_fold(bpf_csum_diff(0, 0, (__be32 *)&r.ip, sizeof(r.ip), 0));
	r.icmp[0] = 3; /* destination unreachable */
	r.icmp[1] = 3; /* port unreachable */
	*(__u16 *)&r.icmp[2] =
		kp_fold(bpf_csum_diff(0, 0, (__be32 *)&r.icmp, 8 + KP_IP_LEN + quote, 0));
	for (i = 0; i < 6; i++) {
		swapped[i] = macs[6 + i];
		swapped[6 + i] = macs[i];
	}
	if (bpf_skb_store_bytes(skb, 0, swapped, sizeof(swapped), 0) ||
	    bpf_skb_store_bytes(skb, KP_IP_OFF, &r, len, 0))
		return TC_ACT_SHOT;
	return bpf_redirect(skb->ifindex, 0);
}

/* kp_reject for IPv6: an ICMPv6 port unreachable (destination unreachable, code 4), its
 * checksum over the pseudo header as ICMPv6 wants. */
static __attribute__((noinline)) int kp_reject6(struct __sk_buff *skb, const struct kp_pkt *p)
{
	struct {
		struct ipv6hdr ip;
		__u8 icmp[8];
		__u8 orig[KP_IP6_LEN + 60];
	} r = {};
	struct {
		__u32 saddr[4];
		__u32 daddr[4];
		__be32 len;
		__be32 next;
	} ph = {};
	__u8 macs[12], swapped[12];
	__u32 quote = 8, len;
	__s64 sum;
	__u8 doff;
	int i;

	if (p->proto == KP_IPPROTO_TCP) {
		if (bpf_skb_load_bytes(skb, KP_L4_OFF6 + 12, &doff, 1))
			return TC_ACT_SHOT;
		quote = (__u32)(doff >> 4) * 4;
	}
	if (skb->len < KP_L4_OFF6 + quote)
		quote = 8;
	quote &= 0x3c;
	if (quote < 8)
		quote = 8;
	len = 8 + KP_IP6_LEN + quote; /* the ICMPv6 message */
	if (bpf_skb_load_bytes(skb, 0, macs, sizeof(macs)) ||
	    bpf_skb_load_bytes(skb, KP_IP_OFF, r.orig, KP_IP6_LEN + quote))
		return TC_ACT_SHOT;
	if (bpf_skb_adjust_room(skb, KP_IP6_LEN + 8, BPF_ADJ_ROOM_NET, 0) ||
	    bpf_skb_change_tail(skb, KP_ETH_LEN + KP_IP6_LEN + len, 0))
		return TC_ACT_SHOT;
	r.ip.version = 6;
	r.ip.payload_len = bpf_htons(len);
	r.ip.nexthdr = KP_IPPROTO_ICMPV6;
	r.ip.hop_limit = 64;
	__builtin_memcpy(&r.ip.saddr, p->daddr, 16);
	__builtin_memcpy(&r.ip.daddr, p->saddr, 16);
	r.icmp[0] = 1; /* destination unreachable */
	r.icmp[1] = 4; /* port unreachable */
	__builtin_memcpy(ph.saddr, p->daddr, 16);
	__builtin_memcpy(ph.daddr, p->saddr, 16);
	ph.len = bpf_htonl(len);
	ph.next = bpf_htonl(KP_IPPROTO_ICMPV6);
	sum = bpf_csum_diff(0, 0, (__be32 *)&ph, sizeof(ph), 0);
	if (sum < 0)
		return TC_ACT_SHOT;
	sum = bpf_csum_diff(0, 0, (__be32 *)&r.icmp, len, (__u32)sum);
	*(__u16 *)&r.icmp[2] = kp_fold(sum);
	for (i = 0; i < 6; i++) {
		swapped[i] = macs[6 + i];
		swapped[6 + i] = macs[i];
	}
	if (bpf_skb_store_bytes(skb, 0, swapped, sizeof(swapped), 0) ||
	    bpf_skb_store_bytes(skb, KP_IP_OFF, &r, KP_IP6_LEN + len, 0))
		return TC_ACT_SHOT;
	return bpf_redirect(skb->ifindex, 0);
}

static __always_inline int kp_reject(struct __sk_buff *skb, const struct kp_pkt *p)
{
	return p->v6 ? kp_reject6(skb, p) : kp_reject4(skb, p);
}

/* 1 when `p`'s source may use the frontend `key` (no ranges, or a range holds it). */
static __attribute__((noinline)) int kp_source_allowed(const struct kp_svc_key *key,
						       const struct kp_pkt *p)
{
	return kp_source_in_ranges(key, p->saddr);
}

/* The node address the kernel would use as source towards `backend` (what a masquerade rule
 * picks) into `out`; 0 when there is none. */
static __always_inline int kp_node_source(struct __sk_buff *skb, const struct kp_pkt *p,
					  const __u32 backend[4], __u32 out[4])
{
	struct bpf_fib_lookup fib = {};

	if (p->v6) {
		fib.family = 10;
		__builtin_memcpy(fib.ipv6_dst, backend, 16);
	} else {
		fib.family = 2;
		fib.ipv4_dst = backend[3];
	}
	fib.ifindex = skb->ingress_ifindex;
	/* A forwarding lookup, as for the packet itself: an output lookup would be bound to
	 * the interface given (the one the packet came in on). BPF_FIB_LOOKUP_SRC: kernel 6.8+. */
	if (bpf_fib_lookup(skb, &fib, sizeof(fib), BPF_FIB_LOOKUP_SRC | BPF_FIB_LOOKUP_SKIP_NEIGH) !=
	    BPF_FIB_LKUP_RET_SUCCESS)
		return 0;
	if (p->v6)
		__builtin_memcpy(out, fib.ipv6_src, 16);
	else
		kp_map4(out, fib.ipv4_src);
	return !(out[0] == 0 && out[1] == 0 && out[3] == 0);
}

/* The affinity key of a client from outside (see kp_aff). */
static __always_inline __u64 kp_client_key(const __u32 addr[4])
{
	__u64 h = (__u64)addr[0] * 0x9e3779b97f4a7c15ULL;

	h ^= (__u64)addr[1] * 0xc2b2ae3d27d4eb4fULL;
	h ^= (__u64)addr[2] * 0x165667b19e3779f9ULL;
	h ^= (__u64)addr[3] * 0x27d4eb2f165667c5ULL;
	return h | (1ULL << 63);
}

/* The backend a new flow of `p` gets: under ClientIP affinity the one this client was given
 * within the timeout, if still in the set (looked for among the first KP_AFFINITY_SCAN slots),
 * else one at random. 0 on success. */
static __attribute__((noinline)) int kp_pick(const struct kp_pkt *p, const struct kp_svc_val *svc,
					     struct kp_backend *be)
{
	struct kp_slot_key slot = {};
	struct kp_aff_key ak = {};
	struct kp_aff_val av = {};
	struct kp_aff_val *known;
	struct kp_backend *b;
	__u64 now = 0;
	__u16 i;

	slot.svc_id = svc->svc_id;
	slot.generation = svc->generation;
	if (svc->flags & KP_SVC_F_AFFINITY) {
		ak.netns_cookie = kp_client_key(p->saddr);
		ak.svc_id = svc->svc_id;
		now = bpf_ktime_get_ns();
		known = bpf_map_lookup_elem(&kp_aff, &ak);
		if (known &&
		    now - known->last_used_ns <= (__u64)svc->affinity_timeout * 1000000000ULL) {
			for (i = 0; i < KP_AFFINITY_SCAN; i++) {
				if (i >= svc->count)
					break;
				slot.slot = i;
				b = bpf_map_lookup_elem(&kp_slot, &slot);
				if (b && kp_same_addr(b->addr, known->addr) && b->port == known->port) {
					*be = *b;
					kp_count(KP_STAT_AFFINE);
					goto remember;
				}
			}
		}
	}
	slot.slot = bpf_get_prandom_u32() % svc->count;
	b = bpf_map_lookup_elem(&kp_slot, &slot);
	if (!b)
		return -1;
	*be = *b;
remember:
	if (svc->flags & KP_SVC_F_AFFINITY) {
		av.last_used_ns = now;
		__builtin_memcpy(av.addr, be->addr, 16);
		av.port = be->port;
		av.slot = slot.slot;
		av.generation = svc->generation;
		bpf_map_update_elem(&kp_aff, &ak, &av, BPF_ANY);
	}
	return 0;
}

/* A new flow to the frontend `svc`, to `chosen`: records both directions, and returns the
 * request direction's rewrite in *fwd. 0 on success, else the tc verdict to return. */
static __attribute__((noinline)) int kp_new_flow(struct __sk_buff *skb, const struct kp_pkt *p,
						 const struct kp_svc_val *svc,
						 struct kp_flow_val *fwd,
						 const struct kp_backend *chosen)
{
	struct kp_flow_key fk = {}, rk = {};
	struct kp_flow_val rv = {};
	struct kp_backend be = *chosen;
	__u32 source[4];
	__be16 sport = p->sport;
	int i, mapped;

	mapped = !be.addr[0] && !be.addr[1] && be.addr[2] == bpf_htonl(0xffff);
	if (mapped == p->v6)
		return TC_ACT_OK; /* a backend of the other family: not ours to translate */
	__builtin_memcpy(source, p->saddr, 16);

	/* The reply direction: from the backend to the client or the node address. */
	__builtin_memcpy(rv.saddr, p->daddr, 16);
	__builtin_memcpy(rv.daddr, p->saddr, 16);
	rv.sport = p->dport;
	rv.dport = p->sport;
	rv.flags = KP_FLOW_F_REPLY;
	__builtin_memcpy(rk.saddr, be.addr, 16);
	rk.sport = be.port;
	rk.proto = p->proto;
	if (svc->flags & KP_SVC_F_SNAT) {
		if (!kp_node_source(skb, p, be.addr, source)) {
			kp_count(KP_STAT_DROPPED);
			return TC_ACT_SHOT;
		}
		rv.flags |= KP_FLOW_F_SNAT;
		__builtin_memcpy(rk.daddr, source, 16);
		/* The client's port if no other flow from this node address to this backend
		 * holds it, else one of a few random ones. */
		for (i = 0; i < KP_NAT_TRIES; i++) {
			rk.dport = sport;
			if (!bpf_map_update_elem(&kp_flow, &rk, &rv, BPF_NOEXIST))
				break;
			sport = bpf_htons(KP_NAT_PORT_MIN +
					  bpf_get_prandom_u32() % KP_NAT_PORT_SPAN);
		}
		if (i == KP_NAT_TRIES) {
			kp_count(KP_STAT_NAT_EXHAUSTED);
			return TC_ACT_SHOT;
		}
	} else {
		__builtin_memcpy(rk.daddr, source, 16);
		rk.dport = sport;
		bpf_map_update_elem(&kp_flow, &rk, &rv, BPF_ANY);
	}

	kp_flow_of(&fk, p);
	__builtin_memcpy(fwd->saddr, source, 16);
	__builtin_memcpy(fwd->daddr, be.addr, 16);
	fwd->sport = sport;
	fwd->dport = be.port;
	fwd->flags = rv.flags & KP_FLOW_F_SNAT;
	fwd->generation = svc->generation;
	bpf_map_update_elem(&kp_flow, &fk, fwd, BPF_ANY);
	kp_count(KP_STAT_TRANSLATED);
	return 0;
}

/*
 * A UDP flow whose backend left its frontend's slot set is forgotten (both directions), so its
 * next datagram is balanced again, as kube-proxy's deletion of a removed endpoint's UDP
 * conntrack entries does. TCP flows keep their backend, as there. Returns 1 when `flow` (a
 * request direction, `*known` in kp_flow) still holds.
 */
static __attribute__((noinline)) int kp_still_served(const struct kp_pkt *p,
						     struct kp_flow_val *known)
{
	struct kp_svc_key key = {};
	struct kp_slot_key slot = {};
	struct kp_flow_key rk = {};
	struct kp_svc_val *svc;
	struct kp_backend *b;
	__u16 i;

	if (p->proto != KP_IPPROTO_UDP || (known->flags & KP_FLOW_F_REPLY))
		return 1;
	__builtin_memcpy(key.addr, p->daddr, 16);
	key.port = p->dport;
	key.proto = p->proto;
	key.scope = KP_SCOPE_EXTERNAL;
	svc = bpf_map_lookup_elem(&kp_svc, &key);
	if (svc && svc->generation == known->generation)
		return 1;
	if (svc) {
		slot.svc_id = svc->svc_id;
		slot.generation = svc->generation;
		for (i = 0; i < KP_AFFINITY_SCAN; i++) {
			if (i >= svc->count)
				break;
			slot.slot = i;
			b = bpf_map_lookup_elem(&kp_slot, &slot);
			if (b && b->addr[3] == known->daddr[3] && b->addr[2] == known->daddr[2] &&
			    b->addr[1] == known->daddr[1] && b->addr[0] == known->daddr[0] &&
			    b->port == known->dport) {
				known->generation = svc->generation;
				return 1;
			}
		}
	}
	/* The reply direction: from the backend to the flow's (translated) source. */
	__builtin_memcpy(rk.saddr, known->daddr, sizeof(rk.saddr));
	__builtin_memcpy(rk.daddr, known->saddr, sizeof(rk.daddr));
	rk.sport = known->dport;
	rk.dport = known->sport;
	rk.proto = p->proto;
	bpf_map_delete_elem(&kp_flow, &rk);
	return 0;
}

SEC("classifier")
int kp_tc_ingress(struct __sk_buff *skb)
{
	struct kp_pkt p = {};
	struct kp_flow_key fk = {};
	struct kp_svc_key key = {};
	struct kp_flow_val to;
	struct kp_flow_val *known;
	struct kp_svc_val *found;
	struct kp_svc_val svc;
	struct kp_backend be;
	int verdict;

	if (!kp_parse(skb, &p))
		return TC_ACT_OK;
	kp_flow_of(&fk, &p);
	known = bpf_map_lookup_elem(&kp_flow, &fk);
	if (known && !kp_still_served(&p, known)) {
		bpf_map_delete_elem(&kp_flow, &fk);
		known = 0;
	}
	if (known) {
		to = *known;
	} else {
		__builtin_memcpy(key.addr, p.daddr, 16);
		key.port = p.dport;
		key.proto = p.proto;
		key.scope = KP_SCOPE_EXTERNAL;
		found = bpf_map_lookup_elem(&kp_svc, &key);
		if (!found) {
			/* A ClusterIP at a port its Service does not define: its entry at port 0. */
			key.port = KP_UNDEFINED_PORT;
			found = bpf_map_lookup_elem(&kp_svc, &key);
		}
		if (!found)
			return TC_ACT_OK;
		svc = *found;
		if (!kp_source_allowed(&key, &p)) {
			kp_count(KP_STAT_DROPPED);
			return TC_ACT_SHOT;
		}
		if (svc.count == 0) {
			if (svc.flags & KP_SVC_F_DROP) {
				kp_count(KP_STAT_DROPPED);
				return TC_ACT_SHOT;
			}
			kp_count(KP_STAT_REFUSED);
			return kp_reject(skb, &p);
		}
		if (kp_pick(&p, &svc, &be))
			return TC_ACT_OK;
		verdict = kp_new_flow(skb, &p, &svc, &to, &be);
		if (verdict)
			return verdict;
	}
	if (kp_rewrite(skb, &p, &to))
		return TC_ACT_SHOT;
	return kp_forward(skb, &p);
}

SEC("classifier")
int kp_tc_egress(struct __sk_buff *skb)
{
	struct kp_pkt p = {};
	struct kp_flow_key fk = {};
	struct kp_flow_val *known;
	struct kp_flow_val to;

	if (!kp_parse(skb, &p))
		return TC_ACT_OK;
	kp_flow_of(&fk, &p);
	known = bpf_map_lookup_elem(&kp_flow, &fk);
	/* Only a reply whose destination stays (no source NAT): it is already on its way. */
	if (!known || known->flags != KP_FLOW_F_REPLY)
		return TC_ACT_OK;
	to = *known;
	if (kp_rewrite(skb, &p, &to))
		return TC_ACT_SHOT;
	return TC_ACT_OK;
}

char _license[] SEC("license") = "Dual BSD/GPL";
