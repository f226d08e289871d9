package workers

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kvrouter/kv-hint-operator/pkg/router"
	"github.com/kvrouter/kv-hint-operator/pkg/wellknown"
)

// TestPodTopologyDomain reads a worker pod's kv_transfer_domain and
// kv_transfer_enforcement from its annotations, as router_hint and the
// worker type are read, and refuses what breaks their rules.
func TestPodTopologyDomain(t *testing.T) {
	for _, tc := range []struct {
		name                string
		domain, enforcement string
		wantDomain, wantEnf string
		wantErr             string
	}{
		{name: "none"},
		{name: "a domain, preferred by default", domain: "rack-a", wantDomain: "rack-a", wantEnf: router.KVTransferPreferred},
		{name: "required", domain: "rack-a", enforcement: "required", wantDomain: "rack-a", wantEnf: router.KVTransferRequired},
		{name: "preferred", domain: "nvl-7", enforcement: "preferred", wantDomain: "nvl-7", wantEnf: router.KVTransferPreferred},
		{name: "an unknown enforcement", domain: "rack-a", enforcement: "strict", wantErr: `kv_transfer_enforcement "strict": want required or preferred`},
		{name: "enforcement without a domain", enforcement: "required", wantErr: "without a kv_transfer_domain"},
		{name: "a domain that is no DNS label", domain: "Rack A", wantErr: `kv_transfer_domain "Rack A"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ann := map[string]string{wellknown.CapabilitiesAnnotation: "router_hint"}
			if tc.domain != "" {
				ann[wellknown.KVTransferDomainAnnotation] = tc.domain
			}
			if tc.enforcement != "" {
				ann[wellknown.KVTransferEnforcementAnnotation] = tc.enforcement
			}
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "decode-0", Annotations: ann}}
			spec, ok, err := PodWorkerSpec(pod, false)
			if err != nil || !ok {
				t.Fatalf("PodWorkerSpec: %v, %v", ok, err)
			}
			err = spec.Validate()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "decode-0") {
					t.Fatalf("Validate: %v, want an error with %q naming the worker", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			w := &Worker{WorkerSpec: spec}
			if d, e := w.KVTransferDomain(); d != tc.wantDomain || e != tc.wantEnf {
				t.Errorf("KVTransferDomain() = %q, %q; want %q, %q", d, e, tc.wantDomain, tc.wantEnf)
			}
			var _ router.TopologyWorker = w
		})
	}
}
