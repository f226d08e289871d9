package layout

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
)

// notInSDK are modules the public SDK (pkg/) must not depend on at any
// depth, with why: a router that links the dispatcher in process gets
// neither.
var notInSDK = map[string]string{
	"github.com/prometheus/client_golang": "the dispatcher reports through dispatch.Metrics, a hook the host fills; the sidecar's Prometheus series are internal/sidecar/dispatchmetrics",
	"k8s.io/client-go":                    "the SDK runs in routers, not in the cluster's control plane",
}

// TestPublicSDKDependencies: `go list -deps ./pkg/...`, the tests' imports
// included, reaches none of notInSDK.
func TestPublicSDKDependencies(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	list := exec.Command("go", "list", "-deps", "-test", "./pkg/...")
	list.Dir = root
	out, err := list.Output()
	if err != nil {
		t.Fatalf("go list -deps -test ./pkg/...: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 20 {
		t.Fatalf("go list -deps ./pkg/... listed %d packages: %q", len(deps), deps)
	}
	for _, d := range deps {
		for mod, why := range notInSDK {
			if d == mod || strings.HasPrefix(d, mod+"/") {
				t.Errorf("pkg/ depends on %s: %s", d, why)
			}
		}
	}
}
