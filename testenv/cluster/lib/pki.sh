# Certificates (ECDSA P-256, one CA) and kubeconfigs for the control plane, the kubelets
# and the admin (sourced by `cluster up`).

pki_make() {
	mkdir -p "$PKI"
	(
		cd "$PKI"
		openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca.key \
			-out ca.crt -days 7 -subj /CN=kube-proxy-rs-cluster-ca 2>/dev/null
		openssl genrsa -out sa.key 2048 2>/dev/null
		openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
		pki_cert apiserver /CN=kube-apiserver serverAuth \
			"IP:$CP_IP,IP:${SERVICE_CIDR%.0/*}.1,IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
		pki_cert apiserver-kubelet-client /O=system:masters/CN=kube-apiserver-kubelet-client clientAuth
		pki_cert admin /O=system:masters/CN=cluster-admin clientAuth
		pki_kubeconfig admin
		pki_cert controller-manager /CN=system:kube-controller-manager clientAuth
		pki_kubeconfig controller-manager
		pki_cert scheduler /CN=system:kube-scheduler clientAuth
		pki_kubeconfig scheduler
		local n
		for n in $(nodes); do
			pki_cert "$n" "/O=system:nodes/CN=system:node:$n" clientAuth
			pki_kubeconfig "$n"
		done
	)
}

# pki_cert NAME SUBJECT EXTENDED_KEY_USAGE [SUBJECT_ALT_NAMES]
pki_cert() {
	local name=$1 subject=$2 usage=$3 san=${4:-}
	openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$name.key" \
		-out "$name.csr" -subj "$subject" 2>/dev/null
	{
		echo "keyUsage=critical,digitalSignature,keyEncipherment"
		echo "extendedKeyUsage=$usage"
		[[ -z $san ]] || echo "subjectAltName=$san"
	} >"$name.ext"
	openssl x509 -req -in "$name.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 7 \
		-out "$name.crt" -extfile "$name.ext" 2>/dev/null
	rm -f "$name.csr" "$name.ext"
}

# pki_kubeconfig NAME: NAME.kubeconfig with the client certificate NAME.crt.
pki_kubeconfig() {
	cat >"$1.kubeconfig" <<K
apiVersion: v1
kind: Config
clusters: [{name: cluster, cluster: {server: "https://$CP_IP:6443", certificate-authority: $PKI/ca.crt}}]
users: [{name: $1, user: {client-certificate: $PKI/$1.crt, client-key: $PKI/$1.key}}]
contexts: [{name: cluster, context: {cluster: cluster, user: $1}}]
current-context: cluster
K
}
