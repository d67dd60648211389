# The network namespaces and the control plane (sourced by `cluster up`): etcd,
# kube-apiserver (ServiceAccount admission on, reached by the nodes at $CP_IP),
# kube-controller-manager with every controller and node CIDR allocation, kube-scheduler.

network_up() {
	local r n
	for r in "${GUARDED_RANGES[@]}"; do ip route replace blackhole "$r"; done
	ip netns add "$NS_CP"
	ip -n "$NS_CP" link set lo up
	ip -n "$NS_CP" link add kpcbr0 type bridge
	ip -n "$NS_CP" addr add "$CP_IP/24" dev kpcbr0
	ip -n "$NS_CP" link set kpcbr0 up
	for n in $(nodes); do
		ip netns add "$n"
		ip -n "$n" link set lo up
		ip -n "$NS_CP" link add "v-$n" type veth peer name eth0 netns "$n"
		ip -n "$NS_CP" link set "v-$n" master kpcbr0 up
		ip -n "$n" addr add "$(node_ip "$n")/24" dev eth0
		ip -n "$n" link set eth0 up
		ip -n "$n" route add default via "$CP_IP"
	done
}

control_plane_up() {
	mkdir -p "$STATE/etcd"
	spawn etcd "$NS_CP" "$TBIN/etcd" --data-dir="$STATE/etcd" --unsafe-no-fsync \
		--listen-client-url=http://127.0.0.1:2379 --listen-peer-url=http://127.0.0.1:2380
	wait_for 60 etcd inns "$NS_CP" curl -sf http://127.0.0.1:2379/health
	spawn kube-apiserver "$NS_CP" "$TBIN/kube-apiserver" --etcd-servers=http://127.0.0.1:2379 \
		--bind-address=0.0.0.0 --advertise-address="$CP_IP" --secure-port=6443 --cert-dir="$PKI" \
		--tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" \
		--client-ca-file="$PKI/ca.crt" \
		--kubelet-client-certificate="$PKI/apiserver-kubelet-client.crt" \
		--kubelet-client-key="$PKI/apiserver-kubelet-client.key" \
		--kubelet-preferred-address-types=InternalIP,Hostname \
		--service-account-issuer=https://kubernetes.default.svc.cluster.local \
		--service-account-key-file="$PKI/sa.pub" --service-account-signing-key-file="$PKI/sa.key" \
		--service-cluster-ip-range="$SERVICE_CIDR" --authorization-mode=Node,RBAC \
		--allow-privileged=true --profiling=false --v=1
	wait_for 120 kube-apiserver inns "$NS_CP" curl -sf --cacert "$PKI/ca.crt" \
		--cert "$PKI/admin.crt" --key "$PKI/admin.key" "https://$CP_IP:6443/readyz"
	spawn kube-controller-manager "$NS_CP" "$TBIN/kube-controller-manager" \
		--kubeconfig="$PKI/controller-manager.kubeconfig" \
		--authentication-kubeconfig="$PKI/controller-manager.kubeconfig" \
		--authorization-kubeconfig="$PKI/controller-manager.kubeconfig" \
		--leader-elect=false --bind-address=127.0.0.1 --secure-port=10257 \
		--use-service-account-credentials=true --service-account-private-key-file="$PKI/sa.key" \
		--root-ca-file="$PKI/ca.crt" --cluster-signing-cert-file="$PKI/ca.crt" \
		--cluster-signing-key-file="$PKI/ca.key" --allocate-node-cidrs=true \
		--cluster-cidr="$CLUSTER_CIDR" --node-cidr-mask-size=24 \
		--service-cluster-ip-range="$SERVICE_CIDR" --v=1
	spawn kube-scheduler "$NS_CP" "$CBIN/kube-scheduler" --kubeconfig="$PKI/scheduler.kubeconfig" \
		--authentication-kubeconfig="$PKI/scheduler.kubeconfig" \
		--authorization-kubeconfig="$PKI/scheduler.kubeconfig" \
		--leader-elect=false --bind-address=127.0.0.1 --secure-port=10259 --v=1
	wait_for 60 kube-controller-manager inns "$NS_CP" curl -skf https://127.0.0.1:10257/healthz
	wait_for 60 kube-scheduler inns "$NS_CP" curl -skf https://127.0.0.1:10259/healthz
}
