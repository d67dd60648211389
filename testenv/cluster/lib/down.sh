# `cluster down` (sourced): everything `cluster up` made, removed, also after a failed or
# half-done up: pods torn down by their kubelets, proxies, kubelets, containerd and its shims,
# the control plane, mounts, cgroups, namespaces, the host's blackhole routes; the sysctls the
# kubelets changed restored. Logs and e2e reports are kept under $STATE.results.

cluster_down() (
	set +e
	[[ -d $STATE ]] || { say "no cluster"; exit 0; }
	local n pid s t
	# The kubelets tear their pods down (CNI DEL, sandboxes) while they still run.
	if [[ -f $STATE/pids/kube-apiserver ]] && kill -0 "$(cat "$STATE/pids/kube-apiserver")" 2>/dev/null; then
		kc delete daemonset,deployment,replicaset,replicationcontroller,job --all -A --wait=false >/dev/null 2>&1
		kc delete pods --all -A --grace-period=0 --force >/dev/null 2>&1
		wait_for 60 "pods removed" containers_gone || true
	fi
	for f in "$STATE"/pids/proxy-*; do [[ -f $f ]] && stop "$(basename "$f")"; done
	for n in $(nodes); do stop "kubelet-$n"; done
	for n in $(nodes); do
		s=$STATE/$n/containerd.sock
		if [[ -S $s ]]; then
			for t in $(ctr --address "$s" -n k8s.io tasks ls -q 2>/dev/null); do
				ctr --address "$s" -n k8s.io tasks kill -s SIGKILL "$t" >/dev/null 2>&1
			done
			sleep 1
		fi
		stop "containerd-$n"
		# Shims outlive containerd: every process naming this node's socket or state.
		for pid in $(grep -l -a -e "$STATE/$n/" /proc/[0-9]*/cmdline 2>/dev/null | cut -d/ -f3); do
			kill -9 "$pid" 2>/dev/null
		done
		for pid in $(cat $(find /sys/fs/cgroup/*/"$n" /sys/fs/cgroup/"$n" -name cgroup.procs 2>/dev/null) 2>/dev/null); do
			kill -9 "$pid" 2>/dev/null
		done
	done
	for s in kube-scheduler kube-controller-manager kube-apiserver etcd; do stop "$s"; done
	sleep 0.5
	# Mounts below $STATE (deepest first), then the pods' network namespaces our containerd made.
	grep -o " $STATE/[^ ]*" /proc/mounts | sort -r | while read -r m; do umount -l "$m" 2>/dev/null; done
	if [[ -f $STATE/netns.before ]]; then
		for s in $(ls /run/netns 2>/dev/null | grep '^cni-'); do
			grep -qx "$s" "$STATE/netns.before" || ip netns del "$s"
		done
	fi
	# Cgroups, leaves first.
	for n in $(nodes); do
		for s in /sys/fs/cgroup/*/"$n" /sys/fs/cgroup/"$n"; do
			[[ -d $s ]] && find "$s" -depth -type d -exec rmdir {} \; 2>/dev/null
		done
	done
	for n in $(nodes) "$NS_CP"; do ip netns del "$n" 2>/dev/null; done
	# The eBPF mode's pinned programs and maps, per node.
	for n in $(nodes); do rm -rf "/sys/fs/bpf/kube-proxy-rs-$n"; done
	bpffs_restore
	for s in "${GUARDED_RANGES[@]}"; do ip route del blackhole "$s" 2>/dev/null; done
	if [[ -f $STATE/sysctl.before ]]; then
		while read -r k v; do sysctl -qw "$k=$v"; done <"$STATE/sysctl.before"
	fi
	# What our containerd and CNI left outside $STATE.
	rm -f /var/lib/cni/results/kpc-* 2>/dev/null
	for s in /run/containerd /var/lib/cni; do [[ -d $s ]] && find "$s" -depth -type d -empty -delete; done
	local keep
	keep=$STATE.results/$(date +%Y%m%dT%H%M%S)
	mkdir -p "$keep"
	cp -a "$STATE"/logs "$STATE"/e2e-* "$STATE"/deploy "$keep/" 2>/dev/null
	for n in $(nodes); do cp -a "$STATE/$n/pod-logs" "$keep/pod-logs-$n" 2>/dev/null; done
	rm -rf "$STATE"
	say "down; logs and reports in $keep"
)

containers_gone() {
	local n s left=0
	for n in $(nodes); do
		s=$STATE/$n/containerd.sock
		[[ -S $s ]] || continue
		left=$((left + $(ctr --address "$s" -n k8s.io tasks ls -q 2>/dev/null | wc -l)))
	done
	((left == 0))
}
