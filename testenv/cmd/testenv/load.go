package main

// `testenv load`: writes many Services and EndpointSlices into etcd directly, as the API
// server would store them, for benchmarks that need tens of thousands of objects.
//
// Why not through the API server: every Service create in kube-apiserver v1.37 runs the
// ClusterIP allocator's metrics update, which lists and parses every IPAddress object twice
// (ipallocator.Allocator.Used and Free), so creating N Services costs O(N²) API server CPU
// (docs/benchmarks.md, "Scale harness"). Writing the objects to etcd, in the API server's
// storage encoding (protobuf, defaulted by the API types' own defaulters, with the IPAddress
// object the allocator would have made for each ClusterIP), gives the API server the same
// stored state in seconds; it learns of the objects through its etcd watch, as it does of any
// write, and serves them to clients as usual. Every later write of a benchmark (the changes it
// measures) goes through the API server.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/util/uuid"
	coredefaults "k8s.io/kubernetes/pkg/apis/core/v1"
	discoverydefaults "k8s.io/kubernetes/pkg/apis/discovery/v1"
	netutils "k8s.io/utils/net"
)

// The API server's storage layout (k8s.io/kubernetes/pkg/kubeapiserver: the default etcd
// prefix and the resources' key prefixes).
const (
	etcdPrefix = "/registry"
	// The ClusterIP allocator's field manager label value (ipallocator.ControllerName).
	ipAllocatorName = "ipallocator.k8s.io"
	// Operations per etcd transaction: etcd's default --max-txn-ops is 128.
	txnOps = 100
	// Transactions in flight.
	loadWorkers = 8
)

func cmdLoad(args []string) error {
	fs := flag.NewFlagSet("load", flag.ExitOnError)
	dir := fs.String("state", defaultStateDir(), "state directory of a running control plane")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: testenv load [--state DIR] < objects.jsonl\n\n"+
			"Writes the v1 Services and discovery.k8s.io/v1 EndpointSlices on stdin (one JSON object\n"+
			"per line) into etcd as the API server stores them, with an IPAddress for each ClusterIP,\n"+
			"then waits until the API server lists them. An object that exists is an error.\n\n")
		fs.PrintDefaults()
	}
	fs.Parse(args)
	st, err := readState(*dir)
	if err != nil {
		return fmt.Errorf("not running (no %s/state.json)", *dir)
	}
	enc, err := newStorageEncoder()
	if err != nil {
		return err
	}
	t0 := time.Now()
	var objects [][]put
	keys := 0
	counts := map[listPath]int{}
	in := bufio.NewReader(os.Stdin)
	for n := 1; ; n++ {
		line, err := in.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			p, list, perr := enc.object(line, t0)
			if perr != nil {
				return fmt.Errorf("line %d: %w", n, perr)
			}
			objects = append(objects, p)
			keys += len(p)
			counts[list]++
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("read stdin: %w", err)
		}
	}

	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{st.EtcdClientURL}, DialTimeout: 10 * time.Second})
	if err != nil {
		return fmt.Errorf("etcd client: %w", err)
	}
	defer cli.Close()
	if err := putAll(cli, objects); err != nil {
		return err
	}
	wrote := time.Since(t0)

	admin, err := adminHTTPClient(st.StateDir)
	if err != nil {
		return err
	}
	// Both reads a client may make: a consistent one, and the watch cache's (resourceVersion
	// 0), which informers and our watchers list from. The cache follows etcd through its own
	// watch, so it may still be taking in the keys after a consistent read counts them all;
	// a proxy started then would list part of the load and take the rest as watch events.
	for list, want := range counts {
		for _, query := range []string{"?limit=1", "?resourceVersion=0"} {
			if err := waitListed(admin, st.Server, list, query, want, 2*time.Minute); err != nil {
				return err
			}
		}
	}
	fmt.Fprintf(os.Stderr, "testenv load: %d etcd keys written in %.1fs, listed by the API server after %.1fs\n",
		keys, wrote.Seconds(), time.Since(t0).Seconds())
	return nil
}

// put is one etcd key to create.
type put struct {
	key   string
	value []byte
}

// listPath is the API path that lists a loaded kind in its namespace.
type listPath string

type storageEncoder struct {
	scheme  *runtime.Scheme
	decoder runtime.Decoder
	proto   *protobuf.Serializer
}

func newStorageEncoder() (*storageEncoder, error) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		corev1.AddToScheme, discoveryv1.AddToScheme, networkingv1.AddToScheme,
		coredefaults.RegisterDefaults, discoverydefaults.RegisterDefaults,
	} {
		if err := add(scheme); err != nil {
			return nil, err
		}
	}
	return &storageEncoder{
		scheme:  scheme,
		decoder: serializer.NewCodecFactory(scheme).UniversalDeserializer(),
		proto:   protobuf.NewSerializer(scheme, scheme),
	}, nil
}

// object turns one JSON object into the etcd keys the API server would have written for it;
// they are written in one transaction (see putAll).
func (e *storageEncoder) object(line []byte, now time.Time) ([]put, listPath, error) {
	obj, gvk, err := e.decoder.Decode(line, nil, nil)
	if err != nil {
		return nil, "", err
	}
	e.scheme.Default(obj)
	created := metav1.NewTime(now)
	switch o := obj.(type) {
	case *corev1.Service:
		if err := prepareService(o); err != nil {
			return nil, "", fmt.Errorf("service %s/%s: %w", o.Namespace, o.Name, err)
		}
		o.UID, o.CreationTimestamp = uuid.NewUUID(), created
		value, err := e.encode(o, corev1.SchemeGroupVersion.WithKind("Service"))
		if err != nil {
			return nil, "", err
		}
		var puts []put
		for _, ip := range o.Spec.ClusterIPs {
			addr, err := e.ipAddress(o, ip, created)
			if err != nil {
				return nil, "", err
			}
			puts = append(puts, addr)
		}
		puts = append(puts, put{etcdPrefix + "/services/specs/" + o.Namespace + "/" + o.Name, value})
		return puts, listPath("/api/v1/namespaces/" + url.PathEscape(o.Namespace) + "/services"), nil
	case *discoveryv1.EndpointSlice:
		if o.Namespace == "" || o.Name == "" {
			return nil, "", fmt.Errorf("endpointslice without a namespace or name")
		}
		o.UID, o.CreationTimestamp, o.Generation = uuid.NewUUID(), created, 1
		value, err := e.encode(o, discoveryv1.SchemeGroupVersion.WithKind("EndpointSlice"))
		if err != nil {
			return nil, "", err
		}
		return []put{{etcdPrefix + "/endpointslices/" + o.Namespace + "/" + o.Name, value}},
			listPath("/apis/discovery.k8s.io/v1/namespaces/" + url.PathEscape(o.Namespace) + "/endpointslices"), nil
	default:
		return nil, "", fmt.Errorf("%s: only v1 Services and discovery.k8s.io/v1 EndpointSlices load", gvk)
	}
}

// prepareService sets what the API server's Service create sets besides defaulting: the
// ClusterIPs list and the IP families of a ClusterIP given in the object, which it must give
// (there is no allocator here to pick one).
func prepareService(s *corev1.Service) error {
	if s.Namespace == "" || s.Name == "" {
		return fmt.Errorf("no namespace or name")
	}
	if s.Spec.ClusterIP == "" || s.Spec.ClusterIP == corev1.ClusterIPNone {
		return fmt.Errorf("give spec.clusterIP: load allocates none")
	}
	if len(s.Spec.ClusterIPs) == 0 {
		s.Spec.ClusterIPs = []string{s.Spec.ClusterIP}
	}
	if len(s.Spec.IPFamilies) == 0 {
		for _, ip := range s.Spec.ClusterIPs {
			family := corev1.IPv4Protocol
			if netutils.IsIPv6String(ip) {
				family = corev1.IPv6Protocol
			}
			s.Spec.IPFamilies = append(s.Spec.IPFamilies, family)
		}
	}
	if s.Spec.IPFamilyPolicy == nil {
		policy := corev1.IPFamilyPolicySingleStack
		if len(s.Spec.ClusterIPs) > 1 {
			policy = corev1.IPFamilyPolicyRequireDualStack
		}
		s.Spec.IPFamilyPolicy = &policy
	}
	return nil
}

// ipAddress is the IPAddress object the ClusterIP allocator creates for one of a Service's IPs.
func (e *storageEncoder) ipAddress(s *corev1.Service, ip string, created metav1.Time) (put, error) {
	parsed := netutils.ParseIPSloppy(ip)
	if parsed == nil {
		return put{}, fmt.Errorf("service %s/%s: bad ClusterIP %q", s.Namespace, s.Name, ip)
	}
	family := string(corev1.IPv4Protocol)
	if parsed.To4() == nil {
		family = string(corev1.IPv6Protocol)
	}
	name := parsed.String()
	addr := &networkingv1.IPAddress{
		ObjectMeta: metav1.ObjectMeta{
			Name:              name,
			UID:               uuid.NewUUID(),
			CreationTimestamp: created,
			Labels: map[string]string{
				networkingv1.LabelIPAddressFamily: family,
				networkingv1.LabelManagedBy:       ipAllocatorName,
			},
		},
		Spec: networkingv1.IPAddressSpec{ParentRef: &networkingv1.ParentReference{
			Group: "", Resource: "services", Namespace: s.Namespace, Name: s.Name,
		}},
	}
	value, err := e.encode(addr, networkingv1.SchemeGroupVersion.WithKind("IPAddress"))
	if err != nil {
		return put{}, err
	}
	return put{etcdPrefix + "/ipaddresses/" + name, value}, nil
}

// encode gives the object's storage form: protobuf with the API server's envelope, the type
// given (the storage version the API server writes: v1 for all three kinds).
func (e *storageEncoder) encode(obj runtime.Object, gvk schema.GroupVersionKind) ([]byte, error) {
	obj.GetObjectKind().SetGroupVersionKind(gvk)
	var buf bytes.Buffer
	if err := e.proto.Encode(obj, &buf); err != nil {
		return nil, fmt.Errorf("encode %s: %w", gvk.Kind, err)
	}
	return buf.Bytes(), nil
}

// putAll creates every key, failing if one exists: a second load, or an object already
// made through the API server, is the caller's mistake, never overwritten.
//
// One object's keys (a Service and its IPAddresses) always go in the same transaction. The
// API server's IPAddress repair controller watches Services: a Service whose IPAddress is not
// there yet gets one made for it within milliseconds, and the transaction carrying the
// IPAddress then finds its key taken (seen in CI when a batch ended between the two).
func putAll(cli *clientv3.Client, objects [][]put) error {
	batches := make(chan []put)
	errs := make(chan error, loadWorkers)
	var wg sync.WaitGroup
	for w := 0; w < loadWorkers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for batch := range batches {
				if err := putBatch(cli, batch); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	var failed error
	for _, batch := range batchObjects(objects, txnOps) {
		if failed != nil {
			break
		}
		select {
		case batches <- batch:
		case failed = <-errs:
		}
	}
	close(batches)
	wg.Wait()
	close(errs)
	if failed != nil {
		return failed
	}
	return <-errs
}

// batchObjects packs whole objects into batches of at most `limit` keys (an object with more
// keys than that gets a batch of its own).
func batchObjects(objects [][]put, limit int) [][]put {
	var batches [][]put
	var cur []put
	for _, keys := range objects {
		if len(cur) > 0 && len(cur)+len(keys) > limit {
			batches = append(batches, cur)
			cur = nil
		}
		cur = append(cur, keys...)
	}
	if len(cur) > 0 {
		batches = append(batches, cur)
	}
	return batches
}

func putBatch(cli *clientv3.Client, batch []put) error {
	ifs := make([]clientv3.Cmp, len(batch))
	thens := make([]clientv3.Op, len(batch))
	for i, p := range batch {
		ifs[i] = clientv3.Compare(clientv3.CreateRevision(p.key), "=", 0)
		thens[i] = clientv3.OpPut(p.key, string(p.value))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := cli.Txn(ctx).If(ifs...).Then(thens...).Commit()
	if err != nil {
		return fmt.Errorf("etcd transaction: %w", err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("one of %s .. %s exists already", batch[0].key, batch[len(batch)-1].key)
	}
	return nil
}

// waitListed waits until a list through the API server with `query` holds at least `want`
// objects. A consistent count does not mean the watch cache holds them all: a proxy started
// right after a large load can list only part of them from the cache.
func waitListed(c *http.Client, server string, path listPath, query string, want int, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		got, err := listCount(c, server+string(path)+query)
		if err == nil && got >= want {
			return nil
		}
		if time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("list %s%s: %w", path, query, err)
			}
			return fmt.Errorf("list %s%s: %d objects after %s, want at least %d", path, query, got, limit, want)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// listCount is the number of objects a list names: the page's items and remainingItemCount.
func listCount(c *http.Client, u string) (int, error) {
	resp, err := c.Get(u)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("%s", resp.Status)
	}
	var list struct {
		Metadata struct {
			RemainingItemCount *int64 `json:"remainingItemCount"`
		} `json:"metadata"`
		Items []json.RawMessage `json:"items"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		return 0, err
	}
	n := len(list.Items)
	if list.Metadata.RemainingItemCount != nil {
		n += int(*list.Metadata.RemainingItemCount)
	}
	return n, nil
}
