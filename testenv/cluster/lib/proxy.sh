# The proxy under test on every node (sourced by `cluster`): kube-proxy-rs from deploy/ as an
# operator applies it, or upstream kube-proxy as kubeadm deploys it; either as a DaemonSet run
# by the kubelets from a local image (the default), or as plain processes in the nodes'
# namespaces (`--as process`, for modes whose DaemonSet needs host parts this machine lacks).

UPSTREAM_IMAGE=registry.k8s.io/kube-proxy:v1.37.2
OURS_IMAGE=localhost/kube-proxy-rs:cluster

# The binary of ours: $KPRS_BIN, else the release build, else the debug build.
ours_binary() {
	local b
	for b in "${KPRS_BIN:-}" "$REPO/target/release/kube-proxy-rs" "$REPO/target/debug/kube-proxy-rs"; do
		[[ -n $b && -x $b ]] && { echo "$b"; return; }
	done
	say "no kube-proxy-rs binary: build it (cargo build --release) or set KPRS_BIN"
	return 1
}

# Both proxies' images, into $STATE/images (imported by node_up): the binary on a rootfs with
# the tools a proxy calls (iptables in both flavours, nft, ipset, conntrack), as upstream's
# image carries them.
proxy_images_make() {
	. "$CLUSTER_HOME/lib/image.sh"
	local work tools=() t x
	work=$(mktemp -d)
	for t in xtables-nft-multi xtables-legacy-multi nft ipset conntrack; do
		tools+=("/usr/sbin/$t")
	done
	mkdir -p "$STATE/images"
	strip -o "$work/kube-proxy-rs" "$(ours_binary)"
	rootfs "$work/ours" "${tools[@]}" "$work/kube-proxy-rs=/usr/local/bin/kube-proxy-rs"
	proxy_rootfs_links "$work/ours"
	image "$work/ours" "$STATE/images/kube-proxy-rs.tar" -t "$OURS_IMAGE"
	rootfs "$work/upstream" "${tools[@]}" "$TBIN/kube-proxy=/usr/local/bin/kube-proxy"
	proxy_rootfs_links "$work/upstream"
	image "$work/upstream" "$STATE/images/kube-proxy.tar" -t "$UPSTREAM_IMAGE"
	rm -rf "$work"
}

# The iptables commands by their names (the nft flavour as the default, as in upstream's
# image on a host without legacy rules) and the extensions xtables loads at run time.
proxy_rootfs_links() {
	local dir=$1 name family
	for family in iptables ip6tables; do
		for name in "" -save -restore; do
			ln -sf xtables-nft-multi "$dir/usr/sbin/$family$name"
			ln -sf xtables-nft-multi "$dir/usr/sbin/$family-nft$name"
			ln -sf xtables-legacy-multi "$dir/usr/sbin/$family-legacy$name"
		done
	done
	mkdir -p "$dir/usr/lib/x86_64-linux-gnu"
	cp -a /usr/lib/x86_64-linux-gnu/xtables "$dir/usr/lib/x86_64-linux-gnu/"
	local lib
	for lib in $(libraries_of /usr/lib/x86_64-linux-gnu/xtables/*.so); do
		[[ -e $dir/$lib ]] || { mkdir -p "$dir/$(dirname "$lib")"; cp -L "$lib" "$dir/$lib"; }
	done
	[[ -f /etc/ethertypes ]] && cp /etc/ethertypes "$dir/etc/"
	return 0
}

# The KubeProxyConfiguration kubeadm writes for this cluster, and its kubeconfig.conf.
kubeadm_config_files() {
	local dir=$1 mode=$2
	mkdir -p "$dir"
	cat >"$dir/config.conf" <<C
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
bindAddress: 0.0.0.0
clientConnection:
  kubeconfig: /var/lib/kube-proxy/kubeconfig.conf
clusterCIDR: $CLUSTER_CIDR
conntrack:
  maxPerCore: 0
mode: "$mode"
C
	cat >"$dir/kubeconfig.conf" <<K
apiVersion: v1
kind: Config
clusters:
- cluster:
    certificate-authority: /var/run/secrets/kubernetes.io/serviceaccount/ca.crt
    server: https://$CP_IP:6443
  name: default
contexts:
- context:
    cluster: default
    namespace: default
    user: default
  name: default
current-context: default
users:
- name: default
  user:
    tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token
K
}

# upstream_daemonset MODE [opt-in]: kubeadm's kube-proxy addon (its ConfigMap, DaemonSet,
# ServiceAccount and RBAC); with opt-in, patched as docs/operations.md says, to leave the
# nodes labelled for kube-proxy-rs.
upstream_daemonset() {
	local mode=$1 dir=$STATE/deploy/upstream
	kubeadm_config_files "$dir" "$mode"
	kc -n kube-system create configmap kube-proxy --from-file="$dir/config.conf" \
		--from-file="$dir/kubeconfig.conf" --dry-run=client -o yaml | kc apply -f - >/dev/null
	sed "s|@IMAGE@|$UPSTREAM_IMAGE|" "$CLUSTER_HOME/manifests/kubeadm-kube-proxy.yaml" | kc apply -f - >/dev/null
	if [[ ${2:-} == opt-in ]]; then
		kc -n kube-system patch daemonset kube-proxy \
			--patch-file "$REPO/deploy/components/node-opt-in/upstream-kube-proxy.yaml" >/dev/null
	fi
}

# ours_daemonset MODE [opt-in] [FILES]: deploy/overlays/MODE as the operator applies it, with
# kubeadm's config.conf and kubeconfig.conf (from the directory FILES, else as kubeadm writes
# them for this cluster) in place of the base's, and the image built here; with opt-in, the
# node-opt-in component.
ours_daemonset() {
	local mode=$1 dir=$STATE/deploy/ours mode_literal="" overlay
	rm -rf "$dir"
	# A mode without an overlay of its own: the base, with the mode set as an overlay sets it.
	overlay=overlays/$mode
	if [[ ! -d $REPO/deploy/$overlay ]]; then
		overlay=base
		mode_literal=", literals: [mode=$mode]"
	fi
	if [[ -n ${3:-} ]]; then
		mkdir -p "$dir/files" && cp "$3/config.conf" "$3/kubeconfig.conf" "$dir/files/"
	else
		kubeadm_config_files "$dir/files" ""
	fi
	{
		echo "apiVersion: kustomize.config.k8s.io/v1beta1"
		echo "kind: Kustomization"
		echo "resources: [overlay]"
		[[ ${2:-} == opt-in ]] && echo "components: [opt-in]"
		echo "configMapGenerator:"
		echo "- {name: kube-proxy-rs, namespace: kube-system, behavior: merge, files: [files/config.conf, files/kubeconfig.conf]$mode_literal}"
		echo "images:"
		echo "- {name: kube-proxy-rs, newName: ${OURS_IMAGE%:*}, newTag: ${OURS_IMAGE##*:}}"
		echo "patches:"
		echo "- {target: {kind: DaemonSet, name: kube-proxy-rs}, patch: '[{\"op\": \"add\", \"path\": \"/spec/template/spec/containers/0/imagePullPolicy\", \"value\": \"Never\"}, {\"op\": \"add\", \"path\": \"/spec/template/spec/initContainers/0/imagePullPolicy\", \"value\": \"Never\"}]'}"
		[[ $mode == ebpf ]] && echo "- {path: ebpf-one-kernel.yaml}"
	} >"$dir/kustomization.yaml"
	# Every node of this cluster shares one kernel, and a cgroup v1 host has cgroup v2 at
	# /sys/fs/cgroup/unified: each node's proxy attaches to that node's own cgroup (the
	# kubelet's cgroupRoot, where its pods are) and pins its maps apart.
	cat >"$dir/ebpf-one-kernel.yaml" <<P
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: kube-proxy-rs, namespace: kube-system}
spec:
  template:
    spec:
      containers:
        - name: kube-proxy-rs
          args:
            - --bpf-cgroup=/run/kube-proxy-rs/cgroupv2/\$(NODE_NAME)
            - --bpf-pin-root=/sys/fs/bpf/kube-proxy-rs-\$(NODE_NAME)
      volumes:
        - name: cgroupv2
          hostPath: {path: $(cgroup2_root), type: Directory}
P
	# kustomize reads files below its root only: the repository's deploy/ is copied in.
	cp -r "$REPO/deploy" "$dir/deploy"
	ln -s "deploy/$overlay" "$dir/overlay"
	ln -s deploy/components/node-opt-in "$dir/opt-in"
	kc kustomize "$dir" >"$dir/rendered.yaml"
	kc apply --server-side -f "$dir/rendered.yaml" >/dev/null
}

# Where the host's cgroup v2 hierarchy is mounted.
cgroup2_root() {
	if [[ -f /sys/fs/cgroup/cgroup.controllers ]]; then echo /sys/fs/cgroup; else echo /sys/fs/cgroup/unified; fi
}

# proxy_start ours|upstream MODE [daemonset|process] [opt-in]
proxy_start() {
	local who=$1 mode=$2 as=${3:-daemonset} n
	echo "$who $mode $as" >"$STATE/proxy"
	[[ $mode == ebpf ]] && bpffs_shared
	if [[ $as == process ]]; then
		local bin
		[[ $who == ours ]] && bin=$(ours_binary) || bin=$TBIN/kube-proxy
		for n in $(nodes); do
			local extra=()
			[[ $mode == ebpf ]] && extra=(--bpf-cgroup="$(cgroup2_root)/$n" --bpf-pin-root="/sys/fs/bpf/kube-proxy-rs-$n")
			spawn "proxy-$n" "$n" "$bin" --kubeconfig="$PKI/admin.kubeconfig" \
				--hostname-override="$n" --proxy-mode="$mode" --cluster-cidr="$CLUSTER_CIDR" \
				--conntrack-max-per-core=0 --v=2 "${extra[@]}"
		done
		return
	fi
	# The proxies' images as they are now (rebuilt by `cluster proxy` when the binary changed).
	local image
	for n in $(nodes); do
		for image in "$STATE"/images/kube-proxy*.tar; do
			ctr --address "$STATE/$n/containerd.sock" -n k8s.io images import "$image" >/dev/null
		done
	done
	if [[ $who == ours ]]; then ours_daemonset "$mode" "${4:-}"; else upstream_daemonset "$mode" "${4:-}"; fi
}

# bpffs_shared: bpffs on the host's /sys/fs/bpf with shared propagation, as a systemd host has
# it. The eBPF overlay's init container mounts it Bidirectional, which the kubelet refuses on a
# private mount (this machine's mounts are all private). What it changes is written down for
# `cluster down` to undo: the mount it made, or the propagation it changed.
bpffs_shared() {
	local fs propagation
	fs=$(findmnt -n -o FSTYPE --mountpoint /sys/fs/bpf 2>/dev/null || true)
	if [[ $fs != bpf ]]; then
		mount -t bpf bpf /sys/fs/bpf
		mount --make-shared /sys/fs/bpf
		echo mounted >"$STATE/bpffs.changed"
		return
	fi
	propagation=$(findmnt -n -o PROPAGATION --mountpoint /sys/fs/bpf)
	case $propagation in
	shared*) ;;
	*)
		mount --make-shared /sys/fs/bpf
		echo "$propagation" >"$STATE/bpffs.changed"
		;;
	esac
}

# bpffs_restore: undoes what bpffs_shared changed (after the pins below it are removed).
bpffs_restore() {
	[[ -f $STATE/bpffs.changed ]] || return 0
	local was
	was=$(cat "$STATE/bpffs.changed")
	case $was in
	mounted) umount -l /sys/fs/bpf ;;
	*slave*) mount --make-slave /sys/fs/bpf ;;
	*) mount --make-private /sys/fs/bpf ;;
	esac
	rm -f "$STATE/bpffs.changed"
}

# proxy_stop: the proxy started by proxy_start stopped on every node, and its rules removed.
proxy_stop() {
	[[ -f $STATE/proxy ]] || return 0
	local who mode as n bin
	read -r who mode as <"$STATE/proxy"
	if [[ $as == process ]]; then
		for n in $(nodes); do stop "proxy-$n"; done
	else
		local ds=kube-proxy
		[[ $who == ours ]] && ds=kube-proxy-rs
		kc -n kube-system delete daemonset "$ds" --wait=true --timeout=120s >/dev/null 2>&1 || true
		wait_for 120 "the $ds pods gone" proxy_pods_gone "$ds"
	fi
	[[ $who == ours ]] && bin=$(ours_binary) || bin=$TBIN/kube-proxy
	for n in $(nodes); do
		local extra=()
		[[ $who == ours && $mode == ebpf ]] && extra=(--bpf-cgroup="$(cgroup2_root)/$n" --bpf-pin-root="/sys/fs/bpf/kube-proxy-rs-$n")
		inns "$n" "$bin" --cleanup --proxy-mode="$mode" "${extra[@]}" >>"$STATE/logs/proxy-cleanup-$n.log" 2>&1 || true
	done
	rm -f "$STATE/proxy"
}

proxy_pods_gone() {
	[[ -z $(kc -n kube-system get pods -l "$(proxy_selector "$1")" -o name 2>/dev/null) ]]
}
proxy_selector() {
	[[ $1 == kube-proxy-rs ]] && echo app.kubernetes.io/name=kube-proxy-rs || echo k8s-app=kube-proxy
}

# proxy_ready: the proxy answers /healthz on every node (the DaemonSet's pods are running it).
proxy_ready() {
	local n
	for n in $(nodes); do
		inns "$n" curl -sf "http://$(node_ip "$n"):10256/healthz" >/dev/null || return 1
	done
}
