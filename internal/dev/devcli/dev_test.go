package devcli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/kvrouter/kv-hint-operator/internal/dev/devenv"
)

// TestDevVerdict: a bounded kvhint-dev dev run passes only when hints reached,
// in-band, exactly the workers that advertise router_hint, none refused,
// and nothing was pushed to a worker that did not opt in.
func TestDevVerdict(t *testing.T) {
	ready := []devenv.RoleStatus{{Name: "r", Conditions: map[string]string{"Ready": "True"}}}
	hinted := devenv.WorkerStatus{ID: "w0", Router: "llama", RouterHint: true, InBand: 5, Requests: 5}
	plain := devenv.WorkerStatus{ID: "w1", Router: "llama", Requests: 5}
	for _, tc := range []struct {
		name    string
		workers []devenv.WorkerStatus
		push    bool
		want    string
	}{
		{"in-band to the capable worker only", []devenv.WorkerStatus{hinted, plain}, false, "OK"},
		{"the capable worker got none", []devenv.WorkerStatus{{ID: "w0", Router: "llama", RouterHint: true, Requests: 5}}, false, "w0 advertises router_hint but received no hint"},
		{"the plain worker got one", []devenv.WorkerStatus{hinted, {ID: "w1", Router: "llama", InBand: 1}}, false, "w1 does not advertise router_hint"},
		{"a refused hint", []devenv.WorkerStatus{{ID: "w0", Router: "llama", RouterHint: true, InBand: 5, Rejected: 1}}, false, "w0 refused 1"},
		{"pushed without an endpoint", []devenv.WorkerStatus{{ID: "w0", Router: "llama", RouterHint: true, InBand: 5, Pushed: 2}}, false, "advertises no hint endpoint"},
		{"push asked, none pushed", []devenv.WorkerStatus{{ID: "w0", Router: "llama", RouterHint: true, HintEndpoint: true, InBand: 5}}, true, "no hint was pushed"},
		{"push asked and done", []devenv.WorkerStatus{{ID: "w0", Router: "llama", RouterHint: true, HintEndpoint: true, InBand: 5, Pushed: 5}, plain}, true, "OK"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			err := devVerdict(&out, &devenv.Status{Roles: ready, Workers: tc.workers}, tc.push)
			if (err == nil) != (tc.want == "OK") || !strings.Contains(out.String(), tc.want) {
				t.Errorf("verdict %v, %q; want %q", err, out.String(), tc.want)
			}
		})
	}
	var out bytes.Buffer
	if err := devVerdict(&out, nil, false); err == nil || !strings.Contains(out.String(), "not every RouterRole") {
		t.Errorf("no status: %v, %q", err, out.String())
	}
}
