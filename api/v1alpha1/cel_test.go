package v1alpha1_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
)

// TestCELRejections checks that the API server itself refuses each
// per-object rule, with the message the CRD gives it.
func TestCELRejections(t *testing.T) {
	ns := testenv.NewNamespace(t, testenv.Get(t).Client, "kvhint-test")
	retains := func(n int) []v1alpha1.HintItem {
		var items []v1alpha1.HintItem
		for i := range n {
			items = append(items, testenv.NamedHint(fmt.Sprintf("retain-%d", i), "kv-retain", nil))
		}
		return items
	}
	for _, tc := range []struct {
		name string
		spec func(*v1alpha1.RouterRoleSpec)
		// want is the server's error text, field path included; empty
		// means the object is valid.
		want string
	}{
		{
			name: "type and policyRef",
			spec: func(s *v1alpha1.RouterRoleSpec) {
				s.Hints = []v1alpha1.HintItem{{Type: "kv-evict", PolicyRef: &v1alpha1.HintPolicyReference{Name: "evict"}}}
			},
			want: `spec.hints[0]: Invalid value: set exactly one of type (an inline hint policy) or policyRef (a HintPolicy in this namespace)`,
		},
		{
			name: "neither type nor policyRef",
			spec: func(s *v1alpha1.RouterRoleSpec) { s.Hints = []v1alpha1.HintItem{{Name: "nameless"}} },
			want: `spec.hints[0]: Invalid value: set exactly one of type (an inline hint policy) or policyRef (a HintPolicy in this namespace)`,
		},
		{
			name: "parameters on a policyRef",
			spec: func(s *v1alpha1.RouterRoleSpec) {
				item := testenv.PolicyRef("retain")
				item.Parameters = testenv.Params(map[string]any{"ttl_seconds": 60})
				s.Hints = []v1alpha1.HintItem{item}
			},
			want: `spec.hints[0]: Invalid value: a policyRef item takes no parameters: they belong to the referenced HintPolicy`,
		},
		{
			name: "repeated name",
			spec: func(s *v1alpha1.RouterRoleSpec) {
				s.Hints = []v1alpha1.HintItem{testenv.NamedHint("retain", "kv-retain", nil), testenv.NamedHint("retain", "kv-retain", map[string]any{"ttl_seconds": 60})}
			},
			want: `spec.hints: Invalid value: hint names must be unique within a role: an item is known by its name, or by its type when it has no name; give each instance of a repeated type a distinct name`,
		},
		{
			name: "repeated type without names",
			spec: func(s *v1alpha1.RouterRoleSpec) {
				s.Hints = []v1alpha1.HintItem{testenv.Hint("kv-retain", nil), testenv.Hint("kv-retain", nil)}
			},
			want: `spec.hints: Invalid value: hint names must be unique within a role`,
		},
		{
			name: "a name that is another item's type",
			spec: func(s *v1alpha1.RouterRoleSpec) {
				s.Hints = []v1alpha1.HintItem{testenv.Hint("kv-evict", nil), testenv.NamedHint("kv-evict", "kv-retain", nil)}
			},
			want: `spec.hints: Invalid value: hint names must be unique within a role`,
		},
		{
			name: "hints off the KV path",
			spec: func(s *v1alpha1.RouterRoleSpec) {
				s.RouterMode = v1alpha1.RouterModeRoundRobin
				s.WorkerSelection.Type = "dynamo-round-robin"
				s.Hints = []v1alpha1.HintItem{testenv.Hint("kv-evict", nil)}
			},
			want: `spec: Invalid value: hints run only on the KV path: with a routerMode other than kv, leave hints out or set hints: []`,
		},
		{
			name: "33 hints",
			spec: func(s *v1alpha1.RouterRoleSpec) { s.Hints = retains(33) },
			want: `spec.hints: Too many: 33: must have at most 32 items`,
		},
		{
			name: "unknown router mode",
			spec: func(s *v1alpha1.RouterRoleSpec) { s.RouterMode = "fastest" },
			want: `spec.routerMode: Unsupported value: "fastest": supported values: "kv", "round-robin", "random", "power-of-two", "least-loaded", "device-aware-weighted", "direct"`,
		},
		{
			name: "role not a DNS label",
			spec: func(s *v1alpha1.RouterRoleSpec) { s.Role = "Decode_Stage" },
			want: `spec.role: Unsupported value: "Decode_Stage": supported values: "aggregated", "prefill", "decode", "encode"`,
		},
		{
			name: "role not one of Dynamo's worker types",
			spec: func(s *v1alpha1.RouterRoleSpec) { s.Role = "rerank" },
			want: `spec.role: Unsupported value: "rerank": supported values: "aggregated", "prefill", "decode", "encode"`,
		},
		{
			name: "hint name not a DNS label",
			spec: func(s *v1alpha1.RouterRoleSpec) {
				s.Hints = []v1alpha1.HintItem{testenv.NamedHint("Retain_Long", "kv-retain", nil)}
			},
			want: `spec.hints[0].name: Invalid value: "Retain_Long": spec.hints[0].name in body should match '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'`,
		},
		{
			name: "router too long",
			spec: func(s *v1alpha1.RouterRoleSpec) { s.Router = strings.Repeat("r", 64) },
			want: `spec.router: Too long: may not be more than 63 bytes`,
		},
		// The rules allow what they should.
		{name: "32 hints", spec: func(s *v1alpha1.RouterRoleSpec) { s.Hints = retains(32) }},
		{
			name: "empty hints off the KV path",
			spec: func(s *v1alpha1.RouterRoleSpec) {
				s.RouterMode = v1alpha1.RouterModeRandom
				s.WorkerSelection.Type = "dynamo-random"
				s.Hints = []v1alpha1.HintItem{}
			},
		},
		{
			name: "a repeated type with distinct names, and two policyRefs without",
			spec: func(s *v1alpha1.RouterRoleSpec) {
				s.Hints = []v1alpha1.HintItem{testenv.Hint("kv-retain", nil), testenv.NamedHint("retain-long", "kv-retain", nil), testenv.PolicyRef("a"), testenv.PolicyRef("b")}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rr := testenv.RouterRole(ns, "", "cel", "decode")
			rr.GenerateName = "cel-"
			tc.spec(&rr.Spec)
			err := testenv.Get(t).Client.Create(context.Background(), rr)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want == "":
				return
			case err == nil:
				t.Fatalf("accepted; want the server to refuse it with %q", tc.want)
			case !apierrors.IsInvalid(err):
				t.Fatalf("got %v; want an Invalid error", err)
			case !strings.Contains(err.Error(), tc.want):
				t.Fatalf("server said:\n  %v\nwant it to contain:\n  %s", err, tc.want)
			}
		})
	}
}
