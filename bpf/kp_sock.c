// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Socket-level load balancing for kube-proxy-rs's eBPF mode: cgroup sock_addr programs that
 * translate a Service address to a backend when a socket connects (TCP, connected UDP) or
 * sends a datagram (unconnected UDP), and translate the backend back to the Service address
 * where the application asks who it talks to (recvmsg's source, getpeername).
 *
 * The proxy fills the maps (kp_maps.h); these programs only read them, except the reverse
 * map, which they fill. Nothing here touches packets: the kernel builds the socket against
 * the backend, so no per-packet NAT and no conntrack entry exist for this traffic.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "kp_shared_maps.h"

#define KP_IPPROTO_TCP 6
#define KP_IPPROTO_UDP 17
/* The errno a refused TCP connection gets; connect() and sendmsg() report it. */
#define KP_ECONNREFUSED 111
/* The errno a frontend whose policy drops gets: a timeout, as a dropped SYN would give. */
#define KP_ETIMEDOUT 110

/* (socket cookie, backend) -> Service address, for recvmsg and getpeername. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, KP_MAX_REVERSE);
	__type(key, struct kp_rev_key);
	__type(value, struct kp_rev_val);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} kp_rev SEC(".maps");

/* NodePorts, for post_bind: written by the proxy. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, KP_MAX_NODEPORTS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct kp_np_key);
	__type(value, __u8);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} kp_nodeport SEC(".maps");

/* Sockets translated through a frontend with loadBalancerSourceRanges: the frontend's key of
 * scope external, whose kp_src entries the egress program checks each packet's source
 * against. */
struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct kp_svc_key);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} kp_restrict SEC(".maps");

enum kp_verdict {
	KP_PASS,        /* not a Service frontend: leave the address alone */
	KP_TRANSLATED,  /* *be holds the backend to use */
	KP_REFUSE,      /* a frontend without endpoints */
	KP_DROP,        /* a frontend whose endpoints this traffic may not use */
};

static __always_inline int kp_same(const struct kp_backend *b, const struct kp_aff_val *a)
{
	return b->addr[0] == a->addr[0] && b->addr[1] == a->addr[1] && b->addr[2] == a->addr[2] &&
	       b->addr[3] == a->addr[3] && b->port == a->port;
}

/* The backend this network namespace was given within the affinity timeout, if it is still
 * in the slot set: at its slot when the set is the same generation, else looked for among
 * the first KP_AFFINITY_SCAN slots. */
static __always_inline int kp_affine(const struct kp_svc_val *svc, const struct kp_aff_val *a,
				     __u64 now, struct kp_backend *be, __u16 *slot_out)
{
	struct kp_slot_key slot = {};
	struct kp_backend *b;
	__u16 i;

	if (now - a->last_used_ns > (__u64)svc->affinity_timeout * 1000000000ULL)
		return 0;
	slot.svc_id = svc->svc_id;
	slot.generation = svc->generation;
	if (a->generation == svc->generation && a->slot < svc->count) {
		slot.slot = a->slot;
		b = bpf_map_lookup_elem(&kp_slot, &slot);
		if (b && kp_same(b, a)) {
			*be = *b;
			*slot_out = a->slot;
			return 1;
		}
	}
	for (i = 0; i < KP_AFFINITY_SCAN; i++) {
		if (i >= svc->count)
			break;
		slot.slot = i;
		b = bpf_map_lookup_elem(&kp_slot, &slot);
		if (b && kp_same(b, a)) {
			*be = *b;
			*slot_out = i;
			return 1;
		}
	}
	return 0;
}

/* Which backend of the frontend `key` this socket gets: the remembered one under affinity;
 * else by socket cookie when `sticky` (unconnected UDP: every datagram of one socket goes to
 * one backend), at random otherwise. */
static __always_inline enum kp_verdict kp_pick(struct bpf_sock_addr *ctx,
					       const struct kp_svc_key *key, __u64 cookie,
					       int sticky, struct kp_backend *be, __u8 *flags)
{
	struct kp_svc_val *found = bpf_map_lookup_elem(&kp_svc, key);
	struct kp_svc_key undefined;
	struct kp_svc_val svc;
	struct kp_slot_key slot = {};
	struct kp_aff_key ak = {};
	struct kp_aff_val av = {};
	struct kp_aff_val *remembered;
	struct kp_backend *b;
	__u64 now = 0;
	__u16 chosen;
	__u32 pick;

	if (!found) {
		/* A ClusterIP at a port its Service does not define: its entry at port 0. */
		undefined = *key;
		undefined.port = KP_UNDEFINED_PORT;
		found = bpf_map_lookup_elem(&kp_svc, &undefined);
	}
	if (!found)
		return KP_PASS;
	svc = *found;
	*flags = svc.flags;
	if (svc.count == 0)
		return (svc.flags & KP_SVC_F_DROP) ? KP_DROP : KP_REFUSE;
	if (svc.flags & KP_SVC_F_AFFINITY) {
		ak.netns_cookie = bpf_get_netns_cookie(ctx);
		ak.svc_id = svc.svc_id;
		now = bpf_ktime_get_ns();
		remembered = bpf_map_lookup_elem(&kp_aff, &ak);
		if (remembered && kp_affine(&svc, remembered, now, be, &chosen)) {
			kp_count(KP_STAT_AFFINE);
			goto remember;
		}
	}
	pick = sticky ? (__u32)(cookie ^ (cookie >> 32)) : bpf_get_prandom_u32();
	slot.svc_id = svc.svc_id;
	slot.generation = svc.generation;
	slot.slot = pick % svc.count;
	b = bpf_map_lookup_elem(&kp_slot, &slot);
	if (!b)
		return KP_PASS;
	*be = *b;
	chosen = slot.slot;
remember:
	if (svc.flags & KP_SVC_F_AFFINITY) {
		av.last_used_ns = now;
		av.addr[0] = be->addr[0];
		av.addr[1] = be->addr[1];
		av.addr[2] = be->addr[2];
		av.addr[3] = be->addr[3];
		av.port = be->port;
		av.slot = chosen;
		av.generation = svc.generation;
		bpf_map_update_elem(&kp_aff, &ak, &av, BPF_ANY);
	}
	return KP_TRANSLATED;
}

static __always_inline void kp_remember(__u64 cookie, const struct kp_backend *be,
					const struct kp_svc_key *key)
{
	struct kp_rev_key rk = {};
	struct kp_rev_val rv = {};

	rk.cookie = cookie;
	rk.addr[0] = be->addr[0];
	rk.addr[1] = be->addr[1];
	rk.addr[2] = be->addr[2];
	rk.addr[3] = be->addr[3];
	rk.port = be->port;
	rv.addr[0] = key->addr[0];
	rv.addr[1] = key->addr[1];
	rv.addr[2] = key->addr[2];
	rv.addr[3] = key->addr[3];
	rv.port = key->port;
	bpf_map_update_elem(&kp_rev, &rk, &rv, BPF_ANY);
}

static __always_inline int kp_is_balanced(__u32 proto)
{
	return proto == KP_IPPROTO_TCP || proto == KP_IPPROTO_UDP;
}

static __always_inline void kp_key4(struct kp_svc_key *key, struct bpf_sock_addr *ctx)
{
	key->addr[0] = 0;
	key->addr[1] = 0;
	key->addr[2] = bpf_htonl(0xffff);
	key->addr[3] = ctx->user_ip4;
	key->port = (__be16)ctx->user_port;
}

static __always_inline void kp_key6(struct kp_svc_key *key, struct bpf_sock_addr *ctx)
{
	key->addr[0] = ctx->user_ip6[0];
	key->addr[1] = ctx->user_ip6[1];
	key->addr[2] = ctx->user_ip6[2];
	key->addr[3] = ctx->user_ip6[3];
	key->port = (__be16)ctx->user_port;
}

/* The forward path of connect and sendmsg: 1 lets the call go on (translated or not);
 * 0 with ECONNREFUSED refuses it (kernel 5.18+ for bpf_set_retval; without it, 0 alone
 * would give EPERM). */
static __always_inline int kp_forward(struct bpf_sock_addr *ctx, int v6, int sticky)
{
	struct kp_svc_key key = {};
	struct kp_backend be;
	struct kp_svc_key *mark;
	__u8 flags = 0;
	__u64 cookie;
	__u32 proto = ctx->protocol;

	if (!kp_is_balanced(proto))
		return 1;
	if (v6)
		kp_key6(&key, ctx);
	else
		kp_key4(&key, ctx);
	key.proto = proto;
	cookie = bpf_get_socket_cookie(ctx);
	switch (kp_pick(ctx, &key, cookie, sticky, &be, &flags)) {
	case KP_PASS:
		return 1;
	case KP_REFUSE:
		kp_count(KP_STAT_REFUSED);
		bpf_set_retval(-KP_ECONNREFUSED);
		return 0;
	case KP_DROP:
		kp_count(KP_STAT_DROPPED);
		bpf_set_retval(-KP_ETIMEDOUT);
		return 0;
	case KP_TRANSLATED:
		kp_count(KP_STAT_TRANSLATED);
		break;
	}
	if (v6) {
		ctx->user_ip6[0] = be.addr[0];
		ctx->user_ip6[1] = be.addr[1];
		ctx->user_ip6[2] = be.addr[2];
		ctx->user_ip6[3] = be.addr[3];
	} else {
		ctx->user_ip4 = be.addr[3];
	}
	ctx->user_port = be.port;
	kp_remember(cookie, &be, &key);
	/* A restricted frontend: the socket's packets are checked on their way out. */
	if (flags & KP_SVC_F_RESTRICTED) {
		mark = bpf_sk_storage_get(&kp_restrict, ctx->sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
		if (mark) {
			*mark = key;
			mark->scope = KP_SCOPE_EXTERNAL;
		}
	} else if (sticky) {
		/* An unconnected UDP socket sending elsewhere now: no longer checked. */
		bpf_sk_storage_delete(&kp_restrict, ctx->sk);
	}
	return 1;
}

/* The reverse path of recvmsg and getpeername: the backend the kernel reports becomes the
 * Service address this socket asked for. These attach types must return 1. */
static __always_inline int kp_reverse(struct bpf_sock_addr *ctx, int v6)
{
	struct kp_rev_key rk = {};
	struct kp_rev_val *rv;

	rk.cookie = bpf_get_socket_cookie(ctx);
	if (v6) {
		rk.addr[0] = ctx->user_ip6[0];
		rk.addr[1] = ctx->user_ip6[1];
		rk.addr[2] = ctx->user_ip6[2];
		rk.addr[3] = ctx->user_ip6[3];
	} else {
		rk.addr[2] = bpf_htonl(0xffff);
		rk.addr[3] = ctx->user_ip4;
	}
	rk.port = (__be16)ctx->user_port;
	rv = bpf_map_lookup_elem(&kp_rev, &rk);
	if (!rv)
		return 1;
	kp_count(KP_STAT_REVERSED);
	if (v6) {
		ctx->user_ip6[0] = rv->addr[0];
		ctx->user_ip6[1] = rv->addr[1];
		ctx->user_ip6[2] = rv->addr[2];
		ctx->user_ip6[3] = rv->addr[3];
	} else {
		ctx->user_ip4 = rv->addr[3];
	}
	ctx->user_port = rv->port;
	return 1;
}

SEC("cgroup/connect4")
int kp_connect4(struct bpf_sock_addr *ctx)
{
	return kp_forward(ctx, 0, 0);
}

SEC("cgroup/connect6")
int kp_connect6(struct bpf_sock_addr *ctx)
{
	return kp_forward(ctx, 1, 0);
}

SEC("cgroup/sendmsg4")
int kp_sendmsg4(struct bpf_sock_addr *ctx)
{
	return kp_forward(ctx, 0, 1);
}

SEC("cgroup/sendmsg6")
int kp_sendmsg6(struct bpf_sock_addr *ctx)
{
	return kp_forward(ctx, 1, 1);
}

SEC("cgroup/recvmsg4")
int kp_recvmsg4(struct bpf_sock_addr *ctx)
{
	return kp_reverse(ctx, 0);
}

SEC("cgroup/recvmsg6")
int kp_recvmsg6(struct bpf_sock_addr *ctx)
{
	return kp_reverse(ctx, 1);
}

SEC("cgroup/getpeername4")
int kp_getpeername4(struct bpf_sock_addr *ctx)
{
	return kp_reverse(ctx, 0);
}

SEC("cgroup/getpeername6")
int kp_getpeername6(struct bpf_sock_addr *ctx)
{
	return kp_reverse(ctx, 1);
}

/* A socket closes: its reverse entry goes at once (the LRU would age it out later). Only a
 * connected socket's is known here (its peer); unconnected UDP sockets' entries age out. */
/* A context field read as one load at its own offset, kept in its branch: the verifier refuses
 * a load through a moved context pointer, which clang 14 makes when it merges the loads of two
 * branches into one through a selected address. */
#define KP_CTX_READ(field)                                                                         \
	({                                                                                         \
		typeof(field) kp_v = *(volatile typeof(field) *)&(field);                          \
		__asm__ __volatile__("" : "+r"(kp_v));                                             \
		kp_v;                                                                              \
	})

SEC("cgroup/sock_release")
int kp_sock_release(struct bpf_sock *ctx)
{
	struct kp_rev_key rk = {};
	__u32 family = ctx->family;

	if (family == 10 /* AF_INET6 */) {
		rk.addr[0] = KP_CTX_READ(ctx->dst_ip6[0]);
		rk.addr[1] = KP_CTX_READ(ctx->dst_ip6[1]);
		rk.addr[2] = KP_CTX_READ(ctx->dst_ip6[2]);
		rk.addr[3] = KP_CTX_READ(ctx->dst_ip6[3]);
	} else if (family == 2 /* AF_INET */) {
		rk.addr[2] = bpf_htonl(0xffff);
		rk.addr[3] = KP_CTX_READ(ctx->dst_ip4);
	} else {
		return 1;
	}
	rk.port = KP_CTX_READ(ctx->dst_port);
	if (rk.port == 0)
		return 1;
	rk.cookie = bpf_get_socket_cookie(ctx);
	bpf_map_delete_elem(&kp_rev, &rk);
	return 1;
}

/* The errno a bind() to a NodePort gets. */
#define KP_EADDRINUSE 98

/* A bind() in the node's network namespace (init_net: the proxy runs there) to a NodePort's
 * port and protocol fails with EADDRINUSE, whatever the address. Other namespaces (pods) are
 * left alone: their ports are their own. */
static __always_inline int kp_bind_check(struct bpf_sock *ctx)
{
	struct kp_np_key k = {};

	if (bpf_get_netns_cookie(ctx) != bpf_get_netns_cookie(0))
		return 1;
	k.port = (__u16)KP_CTX_READ(ctx->src_port);
	k.proto = (__u8)ctx->protocol;
	if (!bpf_map_lookup_elem(&kp_nodeport, &k))
		return 1;
	kp_count(KP_STAT_BIND_REFUSED);
	bpf_set_retval(-KP_EADDRINUSE);
	return 0;
}

SEC("cgroup/post_bind4")
int kp_post_bind4(struct bpf_sock *ctx)
{
	return kp_bind_check(ctx);
}

SEC("cgroup/post_bind6")
int kp_post_bind6(struct bpf_sock *ctx)
{
	return kp_bind_check(ctx);
}

#define KP_ETH_P_IP 0x0800
#define KP_ETH_P_IPV6 0x86DD

/* Each packet a process or pod of the node sends on a socket translated through a restricted
 * LoadBalancer IP (kp_restrict): dropped when its source is outside the frontend's
 * loadBalancerSourceRanges, as kube-proxy drops it before the DNAT. The source is only known
 * here, once the kernel has routed the socket. Other packets pass at the cost of one lookup. */
SEC("cgroup_skb/egress")
int kp_restrict_egress(struct __sk_buff *skb)
{
	struct kp_svc_key *mark;
	struct bpf_sock *sk = skb->sk;
	__u32 src[4] = {};

	if (!sk)
		return 1;
	sk = bpf_sk_fullsock(sk);
	if (!sk)
		return 1;
	mark = bpf_sk_storage_get(&kp_restrict, sk, 0, 0);
	if (!mark)
		return 1;
	if (skb->protocol == bpf_htons(KP_ETH_P_IP)) {
		src[2] = bpf_htonl(0xffff);
		if (bpf_skb_load_bytes(skb, 12, &src[3], 4))
			return 1;
	} else if (skb->protocol == bpf_htons(KP_ETH_P_IPV6)) {
		if (bpf_skb_load_bytes(skb, 8, src, 16))
			return 1;
	} else {
		return 1;
	}
	if (kp_source_in_ranges(mark, src))
		return 1;
	kp_count(KP_STAT_DROPPED);
	return 0;
}

/* The kernel gives GPL-compatible programs all helpers; the file is BSD-2-Clause or GPL-2.0. */
char _license[] SEC("license") = "Dual BSD/GPL";
