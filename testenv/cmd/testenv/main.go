// Command testenv runs a small, real Kubernetes control plane on loopback for
// kube-proxy-rs's integration tests and benchmarks:
//
//	testenv up      start etcd, kube-apiserver and kube-controller-manager
//	                (EndpointSlice controllers only), wait until ready, write
//	                kubeconfigs and print `export KUBECONFIG=...`
//	testenv down    stop what `up` started (by pid) and remove its state
//	testenv status  exit 0 and print the kubeconfig path when it is running
//	testenv bridge  forward 127.0.0.1:PORT inside network namespaces to the
//	                API server on the host's loopback
//
// Everything lives in one state directory (default testenv/.state, or
// $TESTENV_STATE, or --state). The component binaries are looked up next to
// this one (testenv/bin).
package main

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

const usage = `usage: testenv <command> [flags]

commands:
  up       start etcd, kube-apiserver and kube-controller-manager on loopback
  down     stop everything 'up' started and remove the state directory
  status   report whether the control plane in the state directory is ready
  bridge   expose the API server on 127.0.0.1 inside network namespaces
  load     write many Services and EndpointSlices into etcd as the API server stores them

Run 'testenv <command> -h' for the flags of a command.
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "up":
		err = cmdUp(os.Args[2:])
	case "down":
		err = cmdDown(os.Args[2:])
	case "status":
		err = cmdStatus(os.Args[2:])
	case "bridge":
		err = cmdBridge(os.Args[2:])
	case "load":
		err = cmdLoad(os.Args[2:])
	case "reap":
		err = cmdReap(os.Args[2:])
	case "-h", "--help", "help":
		fmt.Print(usage)
		return
	default:
		fmt.Fprintf(os.Stderr, "testenv: unknown command %q\n\n%s", os.Args[1], usage)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "testenv %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

// ---------------------------------------------------------------------------
// paths and state

func binDir() string {
	exe, err := os.Executable()
	if err != nil {
		return "."
	}
	if r, err := filepath.EvalSymlinks(exe); err == nil {
		exe = r
	}
	return filepath.Dir(exe)
}

func defaultStateDir() string {
	if s := os.Getenv("TESTENV_STATE"); s != "" {
		return s
	}
	return filepath.Join(filepath.Dir(binDir()), ".state")
}

// proc is one process that `up` started.
type proc struct {
	Name string `json:"name"`
	Pid  int    `json:"pid"`
	// StartTime is field 22 of /proc/PID/stat, so that a recycled pid is
	// never mistaken for ours.
	StartTime string `json:"start_time"`
	Log       string `json:"log"`
}

// State is written to STATE/state.json once the control plane is ready. The
// Rust test support reads it.
type State struct {
	Version             string `json:"version"`
	Server              string `json:"server"`
	APIServerPort       int    `json:"apiserver_port"`
	EtcdClientURL       string `json:"etcd_client_url"`
	ControllerManager   string `json:"controller_manager_url"`
	Kubeconfig          string `json:"kubeconfig"`
	KubeProxyKubeconfig string `json:"kube_proxy_kubeconfig"`
	CAFile              string `json:"ca_file"`
	ServiceCIDR         string `json:"service_cidr"` // as the flag takes it: comma-separated, IPv4 first
	BinDir              string `json:"bin_dir"`
	StateDir            string `json:"state_dir"`
	Procs               []proc `json:"procs"`
	ReaperPid           int    `json:"reaper_pid,omitempty"`
}

// serviceCIDR is the API server's --service-cluster-ip-range: dual-stack,
// IPv4 first, so the primary family is IPv4 (a Service that says nothing
// about families gets one IPv4 ClusterIP) and IPv6 and dual-stack Services
// get their IPv6 ClusterIPs from the second range. /108 is the largest IPv6
// range the API server's allocator accepts (20 bits of host part).
const serviceCIDR = "10.96.0.0/12,fd00:10:96::/108"

// The first address of each range of serviceCIDR. The `kubernetes` Service
// gets the IPv4 one (it is single-stack in the primary family); the API
// server's certificate names both, as a dual-stack cluster's would.
var (
	kubernetesServiceIP   = net.IPv4(10, 96, 0, 1)
	kubernetesServiceIPv6 = net.ParseIP("fd00:10:96::1")
)

func procStartTime(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	// comm (field 2) may contain spaces; fields after the last ')' are plain.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); field 22 is f[19].
	if len(f) < 20 {
		return ""
	}
	if f[0] == "Z" {
		return "" // a zombie is as good as gone
	}
	return f[19]
}

func (p proc) alive() bool {
	return p.Pid > 0 && p.StartTime != "" && procStartTime(p.Pid) == p.StartTime
}

// lockState takes an exclusive flock on STATE.lock (beside the state
// directory, so that removing the directory does not drop the lock).
func lockState(dir string) (func(), error) {
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(dir+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() { unix.Flock(int(f.Fd()), unix.LOCK_UN); f.Close() }, nil
}

// procsFile lists the processes started so far, one JSON object per line, so
// that `down` can stop a half-finished `up`.
func procsFile(dir string) string { return filepath.Join(dir, "procs.jsonl") }

func recordProc(dir string, p proc) error {
	f, err := os.OpenFile(procsFile(dir), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	b, _ := json.Marshal(p)
	_, err = f.Write(append(b, '\n'))
	return err
}

func readProcs(dir string) []proc {
	b, err := os.ReadFile(procsFile(dir))
	if err != nil {
		return nil
	}
	var out []proc
	for _, line := range strings.Split(string(b), "\n") {
		var p proc
		if json.Unmarshal([]byte(line), &p) == nil && p.Pid > 0 {
			out = append(out, p)
		}
	}
	return out
}

func readState(dir string) (*State, error) {
	b, err := os.ReadFile(filepath.Join(dir, "state.json"))
	if err != nil {
		return nil, err
	}
	var s State
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// ---------------------------------------------------------------------------
// down

func cmdDown(args []string) error {
	fs := flag.NewFlagSet("down", flag.ExitOnError)
	dir := fs.String("state", defaultStateDir(), "state directory")
	fs.Parse(args)
	unlock, err := lockState(*dir)
	if err != nil {
		return err
	}
	defer unlock()
	return teardown(*dir, true)
}

// teardown stops every recorded process (newest first: SIGTERM, then SIGKILL
// after 10s) and removes the state directory. It is a no-op when there is no
// state.
func teardown(dir string, verbose bool) error {
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		if verbose {
			fmt.Fprintf(os.Stderr, "testenv down: nothing to do (%s does not exist)\n", dir)
		}
		return nil
	}
	// procs.jsonl also lists the reaper, if any; it is the newest, so it
	// goes first (unless it is the one tearing down).
	procs := readProcs(dir)
	for i := len(procs) - 1; i >= 0; i-- {
		p := procs[i]
		if p.Pid == os.Getpid() || !p.alive() {
			continue
		}
		syscall.Kill(p.Pid, syscall.SIGTERM)
		deadline := time.Now().Add(10 * time.Second)
		for p.alive() && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		if p.alive() {
			syscall.Kill(p.Pid, syscall.SIGKILL)
			for j := 0; j < 100 && p.alive(); j++ {
				time.Sleep(50 * time.Millisecond)
			}
		}
		if verbose {
			fmt.Fprintf(os.Stderr, "testenv down: stopped %s (pid %d)\n", p.Name, p.Pid)
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	if verbose {
		fmt.Fprintf(os.Stderr, "testenv down: removed %s\n", dir)
	}
	return nil
}

// ---------------------------------------------------------------------------
// status

func cmdStatus(args []string) error {
	fs := flag.NewFlagSet("status", flag.ExitOnError)
	dir := fs.String("state", defaultStateDir(), "state directory")
	fs.Parse(args)
	st, err := readState(*dir)
	if err != nil {
		return fmt.Errorf("not running (no %s/state.json)", *dir)
	}
	if err := healthy(st); err != nil {
		return fmt.Errorf("not healthy: %w", err)
	}
	fmt.Printf("export KUBECONFIG=%s\n", st.Kubeconfig)
	return nil
}

func healthy(st *State) error {
	for _, p := range st.Procs {
		if !p.alive() {
			return fmt.Errorf("%s (pid %d) is not running", p.Name, p.Pid)
		}
	}
	c, err := adminHTTPClient(st.StateDir)
	if err != nil {
		return err
	}
	return probe(c, st.Server+"/readyz")
}

// ---------------------------------------------------------------------------
// up

func cmdUp(args []string) error {
	fs := flag.NewFlagSet("up", flag.ExitOnError)
	dir := fs.String("state", defaultStateDir(), "state directory")
	exitWith := fs.Int("exit-with", 0, "tear everything down once the process with this pid exits (used by the Rust test support)")
	controllers := fs.String("controllers", "endpointslice-controller,endpointslice-mirroring-controller", "kube-controller-manager --controllers")
	timeout := fs.Duration("timeout", 3*time.Minute, "how long to wait for the control plane to become ready")
	quiet := fs.Bool("quiet", false, "print only the export line")
	fs.Parse(args)

	abs, err := filepath.Abs(*dir)
	if err != nil {
		return err
	}
	*dir = abs
	unlock, err := lockState(*dir)
	if err != nil {
		return err
	}
	defer unlock()

	if st, err := readState(*dir); err == nil {
		if err := healthy(st); err == nil {
			if !*quiet {
				fmt.Fprintf(os.Stderr, "testenv up: already running (%s)\n", st.Server)
			}
			fmt.Printf("export KUBECONFIG=%s\n", st.Kubeconfig)
			return nil
		}
	}
	// Whatever is left is stale or half-started: clear it.
	_, statErr := os.Stat(*dir)
	if err := teardown(*dir, !*quiet && statErr == nil); err != nil {
		return err
	}

	var lastErr error
	for attempt := 1; attempt <= 3; attempt++ {
		st, err := start(*dir, *controllers, *timeout, *exitWith, *quiet)
		if err == nil {
			fmt.Printf("export KUBECONFIG=%s\n", st.Kubeconfig)
			return nil
		}
		lastErr = err
		if terr := teardown(*dir, false); terr != nil {
			return fmt.Errorf("%v; and cleaning up failed: %v", err, terr)
		}
		var fatal fatalError
		if errors.As(err, &fatal) {
			break
		}
		fmt.Fprintf(os.Stderr, "testenv up: attempt %d failed, retrying with other ports: %v\n", attempt, err)
	}
	return lastErr
}

// fatalError is a failure that another attempt would not fix (a missing
// binary, say).
type fatalError struct{ error }

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func freePorts(n int) ([]int, error) {
	seen := map[int]bool{}
	var out []int
	for len(out) < n {
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out, nil
}

func start(dir, controllers string, timeout time.Duration, exitWith int, quiet bool) (*State, error) {
	t0 := time.Now()
	bin := binDir()
	for _, b := range []string{"etcd", "kube-apiserver", "kube-controller-manager"} {
		if _, err := os.Stat(filepath.Join(bin, b)); err != nil {
			return nil, fatalError{fmt.Errorf("%s/%s is missing: run testenv/build first", bin, b)}
		}
	}
	for _, d := range []string{dir, filepath.Join(dir, "pki"), filepath.Join(dir, "logs")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	if err := writePKI(filepath.Join(dir, "pki")); err != nil {
		return nil, fatalError{fmt.Errorf("generate certificates: %w", err)}
	}
	ports, err := freePorts(4)
	if err != nil {
		return nil, err
	}
	etcdPort, peerPort, apiPort, kcmPort := ports[0], ports[1], ports[2], ports[3]
	pki := func(f string) string { return filepath.Join(dir, "pki", f) }

	st := &State{
		Version:             componentVersion(),
		Server:              fmt.Sprintf("https://127.0.0.1:%d", apiPort),
		APIServerPort:       apiPort,
		EtcdClientURL:       fmt.Sprintf("http://127.0.0.1:%d", etcdPort),
		ControllerManager:   fmt.Sprintf("https://127.0.0.1:%d", kcmPort),
		Kubeconfig:          filepath.Join(dir, "admin.kubeconfig"),
		KubeProxyKubeconfig: filepath.Join(dir, "kube-proxy.kubeconfig"),
		CAFile:              pki("ca.crt"),
		ServiceCIDR:         serviceCIDR,
		BinDir:              bin,
		StateDir:            dir,
	}

	// etcd
	etcd, err := spawn(dir, "etcd", filepath.Join(bin, "etcd"),
		"--data-dir="+filepath.Join(dir, "etcd"),
		"--listen-client-url="+st.EtcdClientURL,
		fmt.Sprintf("--listen-peer-url=http://127.0.0.1:%d", peerPort),
		"--unsafe-no-fsync",
	)
	if err != nil {
		return nil, err
	}
	st.Procs = append(st.Procs, etcd)
	deadline := time.Now().Add(timeout)
	if err := waitFor(etcd, deadline, func() error {
		return probe(http.DefaultClient, st.EtcdClientURL+"/health")
	}); err != nil {
		return nil, err
	}
	logf(quiet, "etcd ready on %s (%.1fs)", st.EtcdClientURL, time.Since(t0).Seconds())

	// kube-apiserver
	api, err := spawn(dir, "kube-apiserver", filepath.Join(bin, "kube-apiserver"),
		"--etcd-servers="+st.EtcdClientURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		// The lease reconciler refuses a loopback advertise address; with
		// none, the `kubernetes` Service simply has no endpoints.
		"--endpoint-reconciler-type=none",
		fmt.Sprintf("--secure-port=%d", apiPort),
		"--cert-dir="+filepath.Join(dir, "pki"),
		"--tls-cert-file="+pki("apiserver.crt"),
		"--tls-private-key-file="+pki("apiserver.key"),
		"--client-ca-file="+pki("ca.crt"),
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+pki("sa.pub"),
		"--service-account-signing-key-file="+pki("sa.key"),
		"--service-cluster-ip-range="+serviceCIDR,
		"--authorization-mode=RBAC",
		// No kubelet or service-account controller runs here: Pods are
		// created with spec.nodeName set and their status patched by tests.
		"--disable-admission-plugins=ServiceAccount",
		// As on kubeadm clusters: node agents such as kube-proxy's DaemonSet
		// run privileged containers.
		"--allow-privileged=true",
		"--profiling=false",
		"--v=1",
	)
	if err != nil {
		return nil, err
	}
	st.Procs = append(st.Procs, api)
	admin, err := adminHTTPClient(dir)
	if err != nil {
		return nil, err
	}
	if err := waitFor(api, deadline, func() error { return probe(admin, st.Server+"/readyz") }); err != nil {
		return nil, err
	}
	logf(quiet, "kube-apiserver ready on %s (%.1fs)", st.Server, time.Since(t0).Seconds())

	if err := writeKubeconfig(st.Kubeconfig, st.Server, pki("ca.crt"), pki("admin.crt"), pki("admin.key"), "testenv-admin"); err != nil {
		return nil, err
	}
	if err := writeKubeconfig(st.KubeProxyKubeconfig, st.Server, pki("ca.crt"), pki("kube-proxy.crt"), pki("kube-proxy.key"), "system:kube-proxy"); err != nil {
		return nil, err
	}

	// kube-controller-manager
	kcm, err := spawn(dir, "kube-controller-manager", filepath.Join(bin, "kube-controller-manager"),
		"--kubeconfig="+st.Kubeconfig,
		"--authentication-kubeconfig="+st.Kubeconfig,
		"--authorization-kubeconfig="+st.Kubeconfig,
		"--controllers="+controllers,
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", kcmPort),
		"--cert-dir="+filepath.Join(dir, "pki", "kcm"),
		// The default 20 qps would make large benchmarks wait on the
		// client-side rate limiter instead of on the controllers.
		"--kube-api-qps=500",
		"--kube-api-burst=1000",
		"--v=1",
	)
	if err != nil {
		return nil, err
	}
	st.Procs = append(st.Procs, kcm)
	insecure := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	if err := waitFor(kcm, deadline, func() error { return probe(insecure, st.ControllerManager+"/healthz") }); err != nil {
		return nil, err
	}
	logf(quiet, "kube-controller-manager ready on %s, controllers %s (%.1fs)", st.ControllerManager, controllers, time.Since(t0).Seconds())

	if exitWith > 0 {
		target := procStartTime(exitWith)
		if target == "" {
			return nil, fatalError{fmt.Errorf("--exit-with %d: no such process", exitWith)}
		}
		reaper, err := spawn(dir, "reaper", filepath.Join(bin, "testenv"), "reap",
			"--state="+dir, fmt.Sprintf("--pid=%d", exitWith), "--start-time="+target)
		if err != nil {
			return nil, err
		}
		st.ReaperPid = reaper.Pid
		logf(quiet, "will tear down when pid %d exits (reaper pid %d)", exitWith, reaper.Pid)
	}

	b, _ := json.MarshalIndent(st, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, "state.json"), append(b, '\n'), 0o644); err != nil {
		return nil, err
	}
	logf(quiet, "ready in %.1fs; state in %s", time.Since(t0).Seconds(), dir)
	return st, nil
}

func logf(quiet bool, format string, args ...any) {
	if !quiet {
		fmt.Fprintf(os.Stderr, "testenv up: "+format+"\n", args...)
	}
}

func componentVersion() string {
	out, err := exec.Command(filepath.Join(binDir(), "kube-apiserver"), "--version").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// spawn starts a detached process (own session, stdin from /dev/null, output
// to STATE/logs/NAME.log) and records it before returning.
func spawn(dir, name, path string, args ...string) (proc, error) {
	logPath := filepath.Join(dir, "logs", name+".log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return proc{}, err
	}
	defer logFile.Close()
	cmd := exec.Command(path, args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return proc{}, fmt.Errorf("start %s: %w", name, err)
	}
	p := proc{Name: name, Pid: cmd.Process.Pid, Log: logPath}
	for i := 0; i < 100 && p.StartTime == ""; i++ {
		p.StartTime = procStartTime(p.Pid)
		if p.StartTime == "" {
			time.Sleep(10 * time.Millisecond)
		}
	}
	// Reap the child if it dies while we are still waiting for it; after
	// `up` exits it is re-parented to init.
	go cmd.Wait()
	if err := recordProc(dir, p); err != nil {
		syscall.Kill(p.Pid, syscall.SIGKILL)
		return proc{}, err
	}
	return p, nil
}

// waitFor polls check until it succeeds, the process dies or the deadline
// passes. Failures carry the tail of the process's log.
func waitFor(p proc, deadline time.Time, check func() error) error {
	var last error
	for {
		if last = check(); last == nil {
			return nil
		}
		if !p.alive() {
			err := fmt.Errorf("%s exited during start-up; last lines of %s:\n%s", p.Name, p.Log, tail(p.Log, 12))
			if b, _ := os.ReadFile(p.Log); bytes.Contains(b, []byte("address already in use")) {
				return err // lost a race for a free port: worth another attempt
			}
			return fatalError{err}
		}
		if time.Now().After(deadline) {
			return fatalError{fmt.Errorf("%s not ready in time (%v); last lines of %s:\n%s", p.Name, last, p.Log, tail(p.Log, 12))}
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "    " + strings.Join(lines, "\n    ")
}

func probe(c *http.Client, url string) error {
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, bytes.TrimSpace(body))
	}
	return nil
}

func adminHTTPClient(dir string) (*http.Client, error) {
	pki := filepath.Join(dir, "pki")
	cert, err := tls.LoadX509KeyPair(filepath.Join(pki, "admin.crt"), filepath.Join(pki, "admin.key"))
	if err != nil {
		return nil, err
	}
	caPEM, err := os.ReadFile(filepath.Join(pki, "ca.crt"))
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	return &http.Client{
		Timeout: 5 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{
			RootCAs:      pool,
			Certificates: []tls.Certificate{cert},
		}},
	}, nil
}

// ---------------------------------------------------------------------------
// certificates

func writePKI(dir string) error {
	now := time.Now().Add(-time.Hour)
	notAfter := now.Add(365 * 24 * time.Hour)

	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "kube-proxy-rs testenv CA"},
		NotBefore:             now,
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}
	if err := writeCertKey(dir, "ca", caDER, caKey); err != nil {
		return err
	}

	serial := int64(2)
	leaf := func(name string, tmpl *x509.Certificate) error {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		tmpl.SerialNumber = big.NewInt(serial)
		serial++
		tmpl.NotBefore, tmpl.NotAfter = now, notAfter
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			return err
		}
		return writeCertKey(dir, name, der, key)
	}
	if err := leaf("apiserver", &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback, kubernetesServiceIP, kubernetesServiceIPv6},
		DNSNames: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
			"kubernetes.default.svc.cluster.local"},
	}); err != nil {
		return err
	}
	if err := leaf("admin", &x509.Certificate{
		Subject:     pkix.Name{CommonName: "testenv-admin", Organization: []string{"system:masters"}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}); err != nil {
		return err
	}
	// system:kube-proxy is bound to the system:node-proxier ClusterRole by
	// the API server's RBAC bootstrap: the permissions a real kube-proxy has.
	if err := leaf("kube-proxy", &x509.Certificate{
		Subject:     pkix.Name{CommonName: "system:kube-proxy"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}); err != nil {
		return err
	}

	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	if err := writeKey(filepath.Join(dir, "sa.key"), saKey); err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "sa.pub"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o644)
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600)
}

func writeCertKey(dir, name string, der []byte, key *ecdsa.PrivateKey) error {
	if err := os.WriteFile(filepath.Join(dir, name+".crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return err
	}
	return writeKey(filepath.Join(dir, name+".key"), key)
}

func writeKubeconfig(path, server, caFile, certFile, keyFile, user string) error {
	data := func(f string) (string, error) {
		b, err := os.ReadFile(f)
		return base64.StdEncoding.EncodeToString(b), err
	}
	ca, err := data(caFile)
	if err != nil {
		return err
	}
	cert, err := data(certFile)
	if err != nil {
		return err
	}
	key, err := data(keyFile)
	if err != nil {
		return err
	}
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: testenv
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: %s
  user:
    client-certificate-data: %s
    client-key-data: %s
contexts:
- name: testenv
  context:
    cluster: testenv
    user: %s
    namespace: default
current-context: testenv
`, server, ca, strconv.Quote(user), cert, key, strconv.Quote(user))
	return os.WriteFile(path, []byte(cfg), 0o600)
}

// ---------------------------------------------------------------------------
// reap: the watchdog that `up --exit-with PID` leaves behind

func cmdReap(args []string) error {
	fs := flag.NewFlagSet("reap", flag.ExitOnError)
	dir := fs.String("state", "", "state directory")
	pid := fs.Int("pid", 0, "process to watch")
	startTime := fs.String("start-time", "", "its start time (field 22 of /proc/PID/stat)")
	fs.Parse(args)
	watched := proc{Pid: *pid, StartTime: *startTime}
	for watched.alive() {
		if _, err := os.Stat(*dir); err != nil {
			return nil // someone else ran `down`
		}
		time.Sleep(300 * time.Millisecond)
	}
	unlock, err := lockState(*dir)
	if err != nil {
		return err
	}
	defer unlock()
	// Keep the control plane's logs beside the state directory for a look
	// after a failed test run.
	keep := filepath.Join(filepath.Dir(*dir), "control-plane-logs")
	os.RemoveAll(keep)
	os.Rename(filepath.Join(*dir, "logs"), keep)
	err = teardown(*dir, false)
	os.Remove(*dir + ".lock")
	return err
}

// ---------------------------------------------------------------------------
// bridge

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(s string) error { *l = append(*l, s); return nil }

func cmdBridge(args []string) error {
	fs := flag.NewFlagSet("bridge", flag.ExitOnError)
	var namespaces listFlag
	fs.Var(&namespaces, "netns", "network namespace to listen in: a name under /var/run/netns, or a path (repeatable)")
	listen := fs.String("listen", "", "address to listen on inside each namespace (default: the host side of --to)")
	to := fs.String("to", "", "address to forward to, dialled from the namespace this process runs in (required)")
	stateDir := fs.String("state", "", "take --to from this testenv state directory's API server")
	fs.Parse(args)
	if *to == "" && *stateDir != "" {
		st, err := readState(*stateDir)
		if err != nil {
			return err
		}
		*to = fmt.Sprintf("127.0.0.1:%d", st.APIServerPort)
	}
	if *to == "" || len(namespaces) == 0 {
		return errors.New("need --to (or --state) and at least one --netns")
	}
	if *listen == "" {
		*listen = *to
	}
	for _, ns := range namespaces {
		l, err := listenInNetns(ns, *listen)
		if err != nil {
			return fmt.Errorf("listen on %s in netns %s: %w", *listen, ns, err)
		}
		go serveBridge(l, *to)
	}
	// The caller waits for this line before it relies on the bridge.
	fmt.Printf("bridge ready: %s in %s -> %s\n", *listen, namespaces.String(), *to)
	os.Stdout.Sync()
	select {}
}

// listenInNetns opens a listening socket inside another network namespace.
// A socket belongs to the namespace of the thread that created it, so the
// socket is made on a locked thread that has joined the namespace; that thread
// is never unlocked, so the Go runtime discards it afterwards.
func listenInNetns(ns, addr string) (net.Listener, error) {
	path := ns
	if !strings.Contains(ns, "/") {
		path = filepath.Join("/var/run/netns", ns)
	}
	type result struct {
		l   net.Listener
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		f, err := os.Open(path)
		if err != nil {
			ch <- result{nil, err}
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- result{nil, fmt.Errorf("setns: %w", err)}
			return
		}
		l, err := net.Listen("tcp", addr)
		ch <- result{l, err}
	}()
	r := <-ch
	return r.l, r.err
}

func serveBridge(l net.Listener, to string) {
	for {
		c, err := l.Accept()
		if err != nil {
			fmt.Fprintf(os.Stderr, "bridge: accept: %v\n", err)
			return
		}
		go func() {
			defer c.Close()
			u, err := net.DialTimeout("tcp", to, 5*time.Second)
			if err != nil {
				fmt.Fprintf(os.Stderr, "bridge: dial %s: %v\n", to, err)
				return
			}
			defer u.Close()
			done := make(chan struct{}, 2)
			pipe := func(dst, src net.Conn) {
				io.Copy(dst, src)
				if tc, ok := dst.(*net.TCPConn); ok {
					tc.CloseWrite()
				}
				done <- struct{}{}
			}
			go pipe(u, c)
			go pipe(c, u)
			<-done
			<-done
		}()
	}
}
