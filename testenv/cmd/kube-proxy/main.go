// Command kube-proxy is upstream kube-proxy, built unchanged from the pinned
// k8s.io/kubernetes module. It is the peer that kube-proxy-rs is compared
// with in tests and benchmarks.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-proxy/app"
)

func main() {
	os.Exit(cli.Run(app.NewProxyCommand()))
}
