package chart

import (
	"strings"
	"testing"
)

// TestInjectionNeedsTheAPI renders the defaults for Kubernetes 1.33,
// which does not serve MutatingAdmissionPolicy at v1, and for 1.37, which
// does: on 1.33 nothing of the injection is rendered and NOTES says what
// was skipped; on 1.37 the policy, its binding, its checks and its
// parameters are rendered and NOTES tells how pods get the sidecar.
func TestInjectionNeedsTheAPI(t *testing.T) {
	c, err := Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	injection := []string{
		"MutatingAdmissionPolicy /kvhint-sidecar-injection",
		"MutatingAdmissionPolicyBinding /kvhint-sidecar-injection",
		"ValidatingAdmissionPolicy /kvhint-sidecar-injection-params",
		"ValidatingAdmissionPolicyBinding /kvhint-sidecar-injection-params",
		"ValidatingAdmissionPolicy /kvhint-sidecar-injection-router",
		"ValidatingAdmissionPolicyBinding /kvhint-sidecar-injection-router",
		"ConfigMap " + namespace + "/kvhint-sidecar-injection",
	}
	for _, tc := range []struct {
		kube   string
		served bool
		notes  string
	}{
		{"v1.33.4", false, "Sidecar injection was NOT installed: this cluster (Kubernetes\nv1.33.4) does not serve"},
		{"v1.35.0", false, "does not serve\nadmissionregistration.k8s.io/v1 MutatingAdmissionPolicy"},
		{"v1.36.0", true, "Router pods get the kvhint sidecar"},
		{"v1.37.2", true, "Router pods get the kvhint sidecar"},
	} {
		t.Run(tc.kube, func(t *testing.T) {
			caps, err := ClusterCapabilities(tc.kube)
			if err != nil {
				t.Fatal(err)
			}
			if got := caps.APIVersions.Has("admissionregistration.k8s.io/v1/MutatingAdmissionPolicy"); got != tc.served {
				t.Fatalf("capabilities of %s serve MutatingAdmissionPolicy v1: %v", tc.kube, got)
			}
			if !caps.APIVersions.Has("admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy") || !caps.APIVersions.Has("apps/v1/Deployment") {
				t.Fatalf("capabilities of %s lack ValidatingAdmissionPolicy or Deployment", tc.kube)
			}
			objs, notes, err := RenderFor(c, nil, namespace, caps)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]bool{}
			for _, o := range objs {
				got[ident(o)] = true
				if strings.HasPrefix(o.GetKind(), "MutatingAdmissionPolicy") && !tc.served {
					t.Errorf("%s rendered for %s", ident(o), tc.kube)
				}
			}
			for _, id := range injection {
				if got[id] != tc.served {
					t.Errorf("%s: rendered %v for %s, want %v", id, got[id], tc.kube, tc.served)
				}
			}
			if !got["Deployment "+namespace+"/kvhint-manager"] {
				t.Errorf("no manager Deployment for %s", tc.kube)
			}
			if !strings.Contains(notes, tc.notes) {
				t.Errorf("NOTES for %s lack %q:\n%s", tc.kube, tc.notes, notes)
			}
			if tc.served == strings.Contains(notes, "NOT installed") {
				t.Errorf("NOTES for %s:\n%s", tc.kube, notes)
			}
			t.Logf("%s: %d objects", tc.kube, len(objs))
		})
	}
	// Disabled by value: neither rendered nor reported as skipped.
	caps, err := ClusterCapabilities("v1.33.0")
	if err != nil {
		t.Fatal(err)
	}
	_, notes, err := RenderFor(c, map[string]any{"injection": map[string]any{"enable": false}}, namespace, caps)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(notes, "injection") {
		t.Errorf("NOTES with injection.enable=false speak of it:\n%s", notes)
	}
	if _, err := ClusterCapabilities("1.x"); err == nil {
		t.Error("kube version 1.x accepted")
	}
}
