// Command etcd is a minimal single-member etcd for tests: it starts the
// embedded server from go.etcd.io/etcd/server/v3/embed (the version that the
// pinned Kubernetes release uses) on loopback and runs until SIGTERM/SIGINT.
package main

import (
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

func mustURL(s string) url.URL {
	u, err := url.Parse(s)
	if err != nil {
		fmt.Fprintf(os.Stderr, "etcd: bad url %q: %v\n", s, err)
		os.Exit(2)
	}
	return *u
}

func main() {
	dataDir := flag.String("data-dir", "", "directory for the member's data (required)")
	clientURL := flag.String("listen-client-url", "http://127.0.0.1:2379", "URL to serve clients on")
	peerURL := flag.String("listen-peer-url", "http://127.0.0.1:2380", "URL to serve peers on")
	noFsync := flag.Bool("unsafe-no-fsync", false, "skip fsync (faster, loses data on a crash; fine for throwaway test clusters)")
	logLevel := flag.String("log-level", "warn", "zap log level: debug, info, warn, error")
	flag.Parse()
	if *dataDir == "" {
		fmt.Fprintln(os.Stderr, "etcd: --data-dir is required")
		os.Exit(2)
	}

	cfg := embed.NewConfig()
	cfg.Name = "testenv"
	cfg.Dir = *dataDir
	cu, pu := mustURL(*clientURL), mustURL(*peerURL)
	cfg.ListenClientUrls = []url.URL{cu}
	cfg.AdvertiseClientUrls = []url.URL{cu}
	cfg.ListenPeerUrls = []url.URL{pu}
	cfg.AdvertisePeerUrls = []url.URL{pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.UnsafeNoFsync = *noFsync
	cfg.LogLevel = *logLevel
	cfg.LogOutputs = []string{"stderr"}

	srv, err := embed.StartEtcd(cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "etcd: start: %v\n", err)
		os.Exit(1)
	}
	select {
	case <-srv.Server.ReadyNotify():
		fmt.Fprintf(os.Stderr, "etcd: ready, serving clients on %s\n", cu.String())
	case <-time.After(60 * time.Second):
		srv.Server.Stop()
		fmt.Fprintln(os.Stderr, "etcd: not ready after 60s")
		os.Exit(1)
	}

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	select {
	case s := <-sigs:
		fmt.Fprintf(os.Stderr, "etcd: %v, stopping\n", s)
		srv.Close()
	case err := <-srv.Err():
		fmt.Fprintf(os.Stderr, "etcd: %v\n", err)
		srv.Close()
		os.Exit(1)
	}
}
