# A node (sourced by `cluster up`): containerd with runc and the CNI plugins (ptp and
# host-local: routed, no bridge), every image of images/ imported, a kubelet with its own
# cgroup root, and routes to the other nodes' pod CIDRs.

# The sysctls a kubelet sets host-wide; `cluster up` records them, `cluster down` restores them.
KUBELET_SYSCTLS=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
	kernel.keys.root_maxkeys kernel.keys.root_maxbytes)

node_up() {
	local n=$1 ip dir
	ip=$(node_ip "$n")
	dir=$STATE/$n
	mkdir -p "$dir"/{containerd,cni,kubelet,pod-logs,cni-ipam}
	cat >"$dir/containerd.toml" <<T
version = 2
root = "$dir/containerd/root"
state = "$dir/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "$dir/containerd.sock"
[plugins."io.containerd.internal.v1.opt"]
  path = "$dir/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.10.2"
  disable_apparmor = true
  # A machine that withholds CAP_SYS_RESOURCE lets no process lower its oom_score_adj:
  # the sandbox's -998 would fail runc. Clamped to containerd's own.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "$PKG/usr/sbin/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$PKG/usr/lib/cni"
    conf_dir = "$dir/cni"
T
	spawn "containerd-$n" "$n" containerd --config "$dir/containerd.toml"
	wait_for 30 "containerd on $n" ctr --address "$dir/containerd.sock" version
	local image
	for image in "$CLUSTER_HOME"/images/*.tar "$STATE"/images/*.tar; do
		[[ -f $image ]] || continue
		ctr --address "$dir/containerd.sock" -n k8s.io images import "$image" >/dev/null
	done
	node_cgroups_make "$n"
	: >"$STATE/resolv.conf"
	cat >"$dir/kubelet.yaml" <<K
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $ip
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
cgroupDriver: cgroupfs
cgroupRoot: /$n
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://$dir/containerd.sock
podLogsDir: $dir/pod-logs
resolvConf: $STATE/resolv.conf
clusterDomain: cluster.local
clusterDNS: [$DNS_IP]
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $PKI/ca.crt}
authorization: {mode: Webhook}
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
K
	spawn "kubelet-$n" "$n" "$CBIN/kubelet" --config="$dir/kubelet.yaml" \
		--kubeconfig="$PKI/$n.kubeconfig" --root-dir="$dir/kubelet" --hostname-override="$n" \
		--node-ip="$ip" --v=2
	wait_for 120 "node $n registered" node_has_pod_cidr "$n"
	local cidr other
	cidr=$(kc get node "$n" -o jsonpath='{.spec.podCIDR}')
	echo "$cidr" >"$dir/pod-cidr"
	cat >"$dir/cni/10-kpc.conflist" <<C
{"cniVersion": "0.4.0", "name": "kpc", "plugins": [
  {"type": "ptp", "mtu": 1500, "ipMasq": false,
   "ipam": {"type": "host-local", "dataDir": "$dir/cni-ipam", "ranges": [[{"subnet": "$cidr"}]],
            "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "portmap", "capabilities": {"portMappings": true}}]}
C
	ip -n "$NS_CP" route replace "$cidr" via "$ip"
	for other in $(nodes); do
		[[ $other == "$n" ]] && continue
		[[ -e /run/netns/$other ]] && ip -n "$other" route replace "$cidr" via "$ip"
		[[ -f $STATE/$other/pod-cidr ]] && ip -n "$n" route replace "$(cat "$STATE/$other/pod-cidr")" via "$(node_ip "$other")"
	done
	return 0
}

# The kubelet's cgroup root /NODE in every hierarchy (cgroup v1: each controller's; v2: one).
node_cgroups_make() {
	local n=$1 c
	if [[ -f /sys/fs/cgroup/cgroup.controllers ]]; then
		mkdir -p "/sys/fs/cgroup/$n"
		return
	fi
	for c in /sys/fs/cgroup/*/; do
		c=${c%/}
		[[ $(basename "$c") == unified ]] && continue
		mkdir -p "$c/$n"
		if [[ -e $c/cpuset.cpus ]]; then
			cat "$c/cpuset.cpus" >"$c/$n/cpuset.cpus"
			cat "$c/cpuset.mems" >"$c/$n/cpuset.mems"
		fi
	done
}

node_has_pod_cidr() { kc get node "$1" -o jsonpath='{.spec.podCIDR}' | grep -q /; }
node_is_ready() {
	kc get node "$1" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' | grep -q True
}
