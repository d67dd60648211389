// Package e2e builds upstream's end-to-end test binary with only the specs that touch a
// Service proxy: test/e2e/network (Services, Conntrack, EndpointSlice, session affinity,
// traffic distribution, HostPort) and test/e2e/common (the Networking Granular Checks of
// the Conformance set). Built with `go test -c`; run by testenv/cluster/e2e.
package e2e

import (
	"flag"
	"os"
	"testing"

	conformancetestdata "k8s.io/kubernetes/test/conformance/testdata"
	upstream "k8s.io/kubernetes/test/e2e"
	"k8s.io/kubernetes/test/e2e/framework"
	"k8s.io/kubernetes/test/e2e/framework/config"
	"k8s.io/kubernetes/test/e2e/framework/testfiles"
	e2emanifests "k8s.io/kubernetes/test/e2e/testing-manifests"
	"k8s.io/kubernetes/test/fixtures"

	_ "k8s.io/kubernetes/test/e2e/common"
	_ "k8s.io/kubernetes/test/e2e/feature"
	_ "k8s.io/kubernetes/test/e2e/framework/debug/init"
	_ "k8s.io/kubernetes/test/e2e/framework/metrics/init"
	_ "k8s.io/kubernetes/test/e2e/framework/node/init"
	_ "k8s.io/kubernetes/test/e2e/network"
	_ "k8s.io/kubernetes/test/utils/ktesting/format"
)

func TestMain(m *testing.M) {
	config.CopyFlags(config.Flags, flag.CommandLine)
	framework.RegisterCommonFlags(flag.CommandLine)
	framework.RegisterClusterFlags(flag.CommandLine)
	flag.Parse()
	testfiles.AddFileSource(e2emanifests.GetE2ETestingManifestsFS())
	testfiles.AddFileSource(fixtures.GetTestFixturesFS())
	testfiles.AddFileSource(conformancetestdata.GetConformanceTestdataFS())
	framework.AfterReadingAllFlags(&framework.TestContext)
	os.Exit(m.Run())
}

func TestE2E(t *testing.T) {
	upstream.RunE2ETests(t)
}
