package workers

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kvrouter/kv-hint-operator/pkg/dispatch"
	"github.com/kvrouter/kv-hint-operator/pkg/wellknown"
)

// TestPodTopology reads a worker pod's topology_domains (its own
// annotation, and the labels Dynamo's operator copies from the node for a
// DGD's kvTransferPolicy), kv_transfer_domain, kv_transfer_enforcement and
// kv_transfer_preferred_weight, as router_hint and the worker type are
// read, and refuses what breaks Dynamo's rules for them, naming the pod.
func TestPodTopology(t *testing.T) {
	type want struct {
		Domains             map[string]string
		Domain, Enforcement string
		Weight              float64
	}
	zone := map[string]string{"zone": "us-east-1a"}
	for _, tc := range []struct {
		name        string
		annotations map[string]string
		labels      map[string]string
		want        want
		wantErr     string
	}{
		{name: "none"},
		{name: "domains alone, no transfer policy", annotations: map[string]string{wellknown.TopologyDomainsAnnotation: `{"zone": "us-east-1a", "rack": "rack-22"}`},
			want: want{Domains: map[string]string{"zone": "us-east-1a", "rack": "rack-22"}}},
		{name: "a transfer domain, required by default", annotations: map[string]string{wellknown.TopologyDomainsAnnotation: `{"zone": "us-east-1a"}`, wellknown.KVTransferDomainAnnotation: "zone"},
			want: want{Domains: zone, Domain: "zone", Enforcement: dispatch.KVTransferRequired}},
		{name: "preferred with its weight", annotations: map[string]string{wellknown.TopologyDomainsAnnotation: `{"zone": "us-east-1a"}`, wellknown.KVTransferDomainAnnotation: "zone",
			wellknown.KVTransferEnforcementAnnotation: "preferred", wellknown.KVTransferPreferredWeightAnnotation: "0.85"},
			want: want{Domains: zone, Domain: "zone", Enforcement: dispatch.KVTransferPreferred, Weight: 0.85}},
		{name: "Dynamo's ClusterTopology labels", labels: map[string]string{"nvidia.com/dynamo-topology.zone": "us-east-1a", "nvidia.com/dynamo-topology.rack": "rack-22", "app": "decode"},
			annotations: map[string]string{wellknown.KVTransferDomainAnnotation: "rack"},
			want:        want{Domains: map[string]string{"zone": "us-east-1a", "rack": "rack-22"}, Domain: "rack", Enforcement: dispatch.KVTransferRequired}},
		{name: "Dynamo's labelKey: the node label under its own key", labels: map[string]string{"topology.kubernetes.io/zone": "us-east-1a"},
			annotations: map[string]string{"nvidia.com/topology-label-key": "topology.kubernetes.io/zone", wellknown.KVTransferDomainAnnotation: "zone"},
			want:        want{Domains: zone, Domain: "zone", Enforcement: dispatch.KVTransferRequired}},
		{name: "the annotation wins over Dynamo's label", labels: map[string]string{"nvidia.com/dynamo-topology.zone": "us-east-1b"},
			annotations: map[string]string{wellknown.TopologyDomainsAnnotation: `{"zone": "us-east-1a"}`, wellknown.KVTransferDomainAnnotation: "zone"},
			want:        want{Domains: zone, Domain: "zone", Enforcement: dispatch.KVTransferRequired}},
		{name: "a transfer domain the pod has no value in", annotations: map[string]string{wellknown.TopologyDomainsAnnotation: `{"rack": "rack-22"}`, wellknown.KVTransferDomainAnnotation: "zone"},
			wantErr: `kv_transfer_domain="zone", but topology_domains does not contain that domain (it has: rack)`},
		{name: "preferred without a weight", annotations: map[string]string{wellknown.TopologyDomainsAnnotation: `{"zone": "a"}`, wellknown.KVTransferDomainAnnotation: "zone", wellknown.KVTransferEnforcementAnnotation: "preferred"},
			wantErr: `kv_transfer_enforcement preferred for domain "zone", but kv_transfer_preferred_weight is missing`},
		{name: "a weight under required", annotations: map[string]string{wellknown.TopologyDomainsAnnotation: `{"zone": "a"}`, wellknown.KVTransferDomainAnnotation: "zone", wellknown.KVTransferPreferredWeightAnnotation: "0.5"},
			wantErr: "kv_transfer_preferred_weight is set, but kv_transfer_enforcement is required (the default)"},
		{name: "a weight over 1", annotations: map[string]string{wellknown.TopologyDomainsAnnotation: `{"zone": "a"}`, wellknown.KVTransferDomainAnnotation: "zone",
			wellknown.KVTransferEnforcementAnnotation: "preferred", wellknown.KVTransferPreferredWeightAnnotation: "1.5"}, wantErr: "kv_transfer_preferred_weight 1.5: want a number in [0, 1]"},
		{name: "an unknown enforcement", annotations: map[string]string{wellknown.TopologyDomainsAnnotation: `{"zone": "a"}`, wellknown.KVTransferDomainAnnotation: "zone", wellknown.KVTransferEnforcementAnnotation: "strict"},
			wantErr: `kv_transfer_enforcement "strict": want required or preferred`},
		{name: "enforcement without a domain", annotations: map[string]string{wellknown.KVTransferEnforcementAnnotation: "required"}, wantErr: "without a kv_transfer_domain"},
		{name: "a domain name that is no DNS label", annotations: map[string]string{wellknown.TopologyDomainsAnnotation: `{"Zone A": "a"}`}, wantErr: `topology_domains: domain name "Zone A"`},
		{name: "a value that is no label value", annotations: map[string]string{wellknown.TopologyDomainsAnnotation: `{"zone": "us east"}`}, wantErr: `topology_domains: domain zone value "us east"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ann := map[string]string{wellknown.CapabilitiesAnnotation: "router_hint"}
			for k, v := range tc.annotations {
				ann[k] = v
			}
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "decode-0", Annotations: ann, Labels: tc.labels}}
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
			var w dispatch.TopologyWorker = &Worker{WorkerSpec: spec}
			var got want
			got.Domain, got.Enforcement, got.Weight = w.KVTransferPolicy()
			for _, name := range []string{"zone", "rack"} {
				if v, ok := w.TopologyDomain(name); ok {
					if got.Domains == nil {
						got.Domains = map[string]string{}
					}
					got.Domains[name] = v
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("topology (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPodTopologyAnnotationErrors: an annotation that cannot be read at
// all is an error naming the pod and the annotation.
func TestPodTopologyAnnotationErrors(t *testing.T) {
	for ann, want := range map[string]string{
		wellknown.TopologyDomainsAnnotation:           "must be a JSON object from a topology domain",
		wellknown.KVTransferPreferredWeightAnnotation: `is "[not json": want a number in [0, 1]`,
	} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "decode-0", Annotations: map[string]string{ann: "[not json"}}}
		_, _, err := PodWorkerSpec(pod, false)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "decode-0") || !strings.Contains(err.Error(), ann) {
			t.Errorf("%s: %v, want an error with %q naming the pod and the annotation", ann, err, want)
		}
	}
}
