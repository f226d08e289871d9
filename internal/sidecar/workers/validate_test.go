package workers

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kvrouter/kv-hint-operator/pkg/dispatch"
	"github.com/kvrouter/kv-hint-operator/pkg/wellknown"
)

// TestHintEndpointValidation: endpoints that carry credentials, or name a
// link-local, metadata, unspecified or multicast address, are refused when
// they are registered; nothing is sent anywhere. The error never repeats a
// password.
func TestHintEndpointValidation(t *testing.T) {
	for _, tc := range []struct {
		ep, why string
	}{
		{"http://127.0.0.1:8081/v1/hints", ""},
		{"https://decode-0.decode.llama.svc:8443/v1/hints", ""},
		{"http://[::1]:8081/v1/hints", ""},
		{"ftp://127.0.0.1/x", "absolute http or https URL"},
		{"/v1/hints", "absolute http or https URL"},
		{"http://user:s3cret@127.0.0.1:8081/v1/hints", "credentials"},
		{"http://user@127.0.0.1:8081/v1/hints", "credentials"},
		{"http://169.254.169.254/latest/meta-data", "link-local"},
		{"http://169.254.169.254:80/latest/meta-data/iam", "link-local"},
		{"http://[fe80::1]:8081/v1/hints", "link-local"},
		{"http://[fd00:ec2::254]/latest/meta-data", "metadata"},
		{"http://100.100.100.200/latest/meta-data", "metadata"},
		{"http://0.0.0.0:8081/v1/hints", "unspecified"},
		{"http://[::]:8081/v1/hints", "unspecified"},
		{"http://224.0.0.1:8081/v1/hints", "multicast"},
		{"http://127.0.0.1:8081/v1/hints?x=1", "query"},
		{"http://127.0.0.1:8081/v1/hints#frag", "fragment"},
	} {
		t.Run(tc.ep, func(t *testing.T) {
			s := WorkerSpec{ID: "w", Capabilities: []string{dispatch.CapabilityRouterHint}, HintEndpoint: tc.ep}
			err := s.Validate()
			switch {
			case tc.why == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.why != "" && err == nil:
				t.Fatalf("accepted, want refused for %s", tc.why)
			case err != nil && !strings.Contains(err.Error(), tc.why):
				t.Errorf("error %q does not say %q", err, tc.why)
			case err != nil && strings.Contains(err.Error(), "s3cret"):
				t.Errorf("error %q repeats the password", err)
			}
		})
	}
}

// TestPodHintEndpoint: a worker pod's annotation gives a port and a path on
// the pod's own IP, nothing else. Absolute URLs are refused unless the
// sidecar allows them explicitly.
func TestPodHintEndpoint(t *testing.T) {
	pod := func(ep string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "decode-0", Annotations: map[string]string{wellknown.CapabilitiesAnnotation: "router_hint", wellknown.HintEndpointAnnotation: ep}},
			Status:     corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.6"},
		}
	}
	for _, tc := range []struct {
		ep            string
		allowAbsolute bool
		want, why     string
	}{
		{":8081/v1/hints", false, "http://10.0.0.6:8081/v1/hints", ""},
		{":8081", false, "http://10.0.0.6:8081/", ""},
		{":8081/", false, "http://10.0.0.6:8081/", ""},
		{":8081/v1/hints%20x", false, "", "path"},
		// The attack of the report: the "port" smuggles userinfo and a host.
		{":80@127.0.0.1:9300/latest/meta-data", false, "", "port"},
		{":80@169.254.169.254/latest/meta-data", false, "", "port"},
		{":0/v1/hints", false, "", "port"},
		{":65536/v1/hints", false, "", "port"},
		{":8081/v1/hints?next=http://127.0.0.1", false, "", "path"},
		{":8081/v1/hints#x", false, "", "path"},
		{":8081\\@127.0.0.1/", false, "", "port"},
		{"http://127.0.0.1:9300/latest/meta-data", false, "", "--allow-absolute-hint-endpoints"},
		{"http://10.0.0.9:8081/v1/hints", false, "", "--allow-absolute-hint-endpoints"},
		{"http://10.0.0.9:8081/v1/hints", true, "http://10.0.0.9:8081/v1/hints", ""},
		{"http://169.254.169.254/latest/meta-data", true, "", "link-local"},
		{"http://u:s3cret@10.0.0.9:8081/v1/hints", true, "", "credentials"},
		{"10.0.0.9:8081/v1/hints", false, "", "port"},
	} {
		t.Run(tc.ep, func(t *testing.T) {
			spec, ok, err := PodWorkerSpec(pod(tc.ep), tc.allowAbsolute)
			if tc.why != "" {
				if err == nil {
					t.Fatalf("accepted as %q, want refused for %s", spec.HintEndpoint, tc.why)
				}
				if !strings.Contains(err.Error(), tc.why) {
					t.Errorf("error %q does not say %q", err, tc.why)
				}
				if strings.Contains(err.Error(), "s3cret") {
					t.Errorf("error %q repeats the password", err)
				}
				return
			}
			if err != nil || !ok {
				t.Fatalf("refused: ok %v, %v", ok, err)
			}
			if spec.HintEndpoint != tc.want {
				t.Errorf("endpoint %q, want %q", spec.HintEndpoint, tc.want)
			}
		})
	}
}
