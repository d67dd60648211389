# Names, addresses and helpers shared by testenv/cluster's commands (sourced).
#
# The cluster lives in network namespaces: `kpc-cp` holds the control plane and the bridge
# that links the nodes (the "switch"); `kpc-n1`… are the nodes, each with containerd, a
# kubelet and the proxy under test. Processes enter the network namespace only, so the
# kubelets and containerd share the host's mount namespace and their volume mounts work.
# Every address below is reached only from inside those namespaces: while the cluster runs,
# the host namespace holds blackhole routes for all of them.

CLUSTER_HOME=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
REPO=$(cd "$CLUSTER_HOME/../.." && pwd)
STATE=${KPRS_CLUSTER_STATE:-/var/tmp/kube-proxy-rs-cluster}
PKI=$STATE/pki
CBIN=$CLUSTER_HOME/bin          # kubelet, kube-scheduler, e2e.test, ginkgo, coredns, mkimage
TBIN=$REPO/testenv/bin          # etcd, kube-apiserver, kube-controller-manager, kube-proxy, kubectl
PKG=$CLUSTER_HOME/pkgs/root     # containerd, runc, CNI plugins (Debian's, unpacked)
export PATH=$PKG/usr/bin:$PKG/usr/sbin:$PATH

NS_CP=kpc-cp
CP_IP=172.31.250.1
NODE_NET=172.31.250.0/24
CLUSTER_CIDR=10.244.0.0/16
SERVICE_CIDR=10.96.0.0/16
DNS_IP=10.96.0.10
# The ranges the host namespace must never route off the machine while the cluster runs.
GUARDED_RANGES=("$NODE_NET" "$CLUSTER_CIDR" "$SERVICE_CIDR")

node_count() { cat "$STATE/nodes" 2>/dev/null || echo 0; }
nodes() { local i; for ((i = 1; i <= $(node_count); i++)); do echo "kpc-n$i"; done; }
node_ip() { echo "172.31.250.$((10 + ${1#kpc-n}))"; }

# inns NS CMD...: CMD in network namespace NS (the host's mount namespace).
inns() { local ns=$1; shift; nsenter --net="/run/netns/$ns" -- "$@"; }
# The cluster's kubectl, always from inside the control plane's namespace.
kc() { inns "$NS_CP" "$TBIN/kubectl" --kubeconfig="$PKI/admin.kubeconfig" "$@"; }

# spawn NAME NS CMD...: CMD detached in its own session, in NS; log and pid under $STATE.
spawn() {
	local name=$1 ns=$2; shift 2
	mkdir -p "$STATE/logs" "$STATE/pids"
	setsid nsenter --net="/run/netns/$ns" -- "$@" </dev/null >"$STATE/logs/$name.log" 2>&1 &
	echo $! >"$STATE/pids/$name"
}
# stop NAME: TERM, up to 10 s, then KILL the process spawn started.
stop() {
	local f=$STATE/pids/$1 pid i
	[[ -f $f ]] || return 0
	pid=$(cat "$f")
	kill "$pid" 2>/dev/null || true
	for ((i = 0; i < 50; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
	kill -9 "$pid" 2>/dev/null || true
	rm -f "$f"
}
# wait_for SECONDS WHAT CMD...: until CMD succeeds; fails naming WHAT after SECONDS.
wait_for() {
	local limit=$1 what=$2 start=$SECONDS; shift 2
	until "$@" >/dev/null 2>&1; do
		if ((SECONDS - start > limit)); then
			echo "cluster: $what not ready after ${limit}s" >&2
			return 1
		fi
		sleep 0.5
	done
}
say() { echo "cluster: $*" >&2; }
