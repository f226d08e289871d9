package v1alpha1_test

import (
	"strings"
	"testing"

	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
)

// TestKubectlExplain reads the field documentation back from the API
// server, as a person would.
func TestKubectlExplain(t *testing.T) {
	testenv.Get(t)
	for field, want := range map[string]string{
		"routerroles.spec.routerMode":            "routerMode is how the router books workers for this role",
		"routerroles.spec.hints.policyRef":       "policyRef runs a HintPolicy of this namespace",
		"routerroles.status.routerPods.upToDate": "upToDate is the number of those pods",
		"hintpolicies.status.usedBy":             "usedBy lists the RouterRoles of this namespace",
	} {
		out, err := testenv.Get(t).RunKubectl("explain", field)
		if err != nil {
			t.Fatalf("kubectl explain %s: %v\n%s", field, err, out)
		}
		if !strings.Contains(strings.Join(strings.Fields(out), " "), want) {
			t.Errorf("kubectl explain %s:\n%s\nwant it to contain %q", field, out, want)
		}
	}
}

// TestKubectlFieldSelectorRouter lists a router's roles with the
// selectable field spec.router, as the runbooks do: exactly that router's
// roles, whatever else the namespace holds, and none for a router no role
// names.
func TestKubectlFieldSelectorRouter(t *testing.T) {
	ns := testenv.NewNamespace(t, testenv.Get(t).Client, "kvhint-test")
	for _, r := range [][3]string{{"llama-prefill", "llama", "prefill"}, {"llama-decode", "llama", "decode"}, {"chat-decode", "chat", "decode"}, {"llamas-decode", "llamas", "decode"}} {
		rr := testenv.RouterRole(ns, r[0], r[1], r[2])
		rr.Spec.WorkerSelection.Type = "kvcr"
		testenv.Create(t, testenv.Get(t).Client, rr)
	}
	for _, tc := range []struct {
		selector string
		want     string
	}{
		{"spec.router=llama", "llama-decode llama-prefill"},
		{"spec.router=chat", "chat-decode"},
		{"spec.router!=llama", "chat-decode llamas-decode"},
		{"spec.router=embed", ""},
	} {
		out, err := testenv.Get(t).RunKubectl("get", "rr", "-n", ns, "--field-selector", tc.selector,
			"-o", "jsonpath={range .items[*]}{.metadata.name} {end}")
		if err != nil {
			t.Fatalf("kubectl get rr --field-selector %s: %v: %s", tc.selector, err, out)
		}
		if got := strings.Join(strings.Fields(out), " "); got != tc.want {
			t.Errorf("kubectl get rr --field-selector %s listed %q; want %q", tc.selector, got, tc.want)
		}
	}

	// A field that is not selectable is refused by name.
	out, err := testenv.Get(t).RunKubectl("get", "rr", "-n", ns, "--field-selector", "spec.role=decode")
	if err == nil || !strings.Contains(out, "spec.role") {
		t.Errorf("kubectl get rr --field-selector spec.role=decode: err %v, %q; want an error naming spec.role", err, out)
	}
}
