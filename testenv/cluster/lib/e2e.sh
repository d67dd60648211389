# `cluster e2e` (sourced): upstream's e2e specs (bin/e2e.test, the network subset) against the
# running cluster, from the control plane's namespace, in parallel through ginkgo.

# What no cluster here can run: disruptive and serial specs (they stop nodes or need the
# cluster alone), slow ones, feature-gated ones, cloud load balancers, SCTP (no module in
# the host kernel) and IPv6/dual-stack (the cluster is IPv4 only).
E2E_SKIP='\[Disruptive\]|\[Serial\]|\[Slow\]|\[Feature:|LoadBalancer|SCTP|IPv6|DualStack'

# e2e_run LABEL FOCUS [SKIP] [PROCS]: the report (JUnit XML and the log) in $STATE/e2e-LABEL.
e2e_run() {
	local label=$1 focus=$2 skip=${3:-$E2E_SKIP} procs=${4:-4} out rc
	out=$STATE/e2e-$label
	rm -rf "$out"; mkdir -p "$out"
	local started=$SECONDS
	inns "$NS_CP" env KUBECONFIG="$PKI/admin.kubeconfig" "$CBIN/ginkgo" --procs="$procs" \
		--no-color --timeout=3h --focus="$focus" --skip="$skip" --output-dir="$out" \
		--junit-report=junit.xml "$CBIN/e2e.test" -- \
		--kubeconfig="$PKI/admin.kubeconfig" --provider=local --kubectl-path="$TBIN/kubectl" \
		--num-nodes="$(node_count)" --report-dir="$out" --disable-log-dump \
		--dump-logs-on-failure=false >"$out/e2e.log" 2>&1
	rc=$?
	echo "$((SECONDS - started))" >"$out/seconds"
	say "e2e $label: exit $rc in $((SECONDS - started))s (report $out)"
	grep -E '^Ran [0-9]+ of|^(SUCCESS|FAIL)!' "$out/e2e.log" >&2 || true
	return $rc
}
