package rolegraph

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/pkg/hintsconfig"
)

// TestEjectedAnnotationRead: what a pod's ejected-policies annotation
// counts for: well-formed entries of a known reason, once per pod, at most
// the entries a sidecar writes; anything else is skipped, not trusted.
func TestEjectedAnnotationRead(t *testing.T) {
	var flood []string // more than a sidecar writes
	for i := range 20 {
		flood = append(flood, fmt.Sprintf("decode/p%02d=overrun", i))
	}
	var c podCount
	for _, v := range []string{
		"decode/audit=overrun,decode/audit=overrun",                        // once per pod
		"decode/audit=abandoned,prefill/x=busy,,+3",                        // a count of more is no entry
		"decode/audit=melted,decode=overrun,/x=busy,decode/=busy,decode/y", // none of these
		strings.Join(flood, ","),
	} {
		c.addEjected(v)
	}
	got := map[string]string{}
	for role, byPolicy := range c.ejected {
		for policy, on := range byPolicy {
			got[role+"/"+policy] = fmt.Sprintf("%d %s", on.pods, strings.Join(on.reasons, "+"))
		}
	}
	want := map[string]string{"decode/audit": "2 abandoned+overrun", "prefill/x": "1 busy"}
	for i := range 16 { // the first 16 entries of the 20-entry annotation
		want[fmt.Sprintf("decode/p%02d", i)] = "1 overrun"
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("counted (-want +got):\n%s", diff)
	}
}

// TestPolicyEjectedMessageBounded: the condition names at most
// maxEjectedNamed policies and counts the rest.
func TestPolicyEjectedMessageBounded(t *testing.T) {
	var es []string
	for i := range 10 {
		es = append(es, fmt.Sprintf("decode/p%02d=overrun", i))
	}
	c := podCount{total: 2}
	c.addEjected(strings.Join(es, ","))
	rr := &v1alpha1.RouterRole{ObjectMeta: metav1.ObjectMeta{Generation: 3}, Spec: v1alpha1.RouterRoleSpec{Role: "decode"}}
	cond := policyEjectedCondition(rr, &placement{runs: &hintsconfig.Role{}, pods: c})
	if cond == nil {
		t.Fatal("no PolicyEjected condition")
	}
	if n := strings.Count(cond.Message, "is ejected on 1/2 router pods (overrun)"); n != maxEjectedNamed {
		t.Errorf("%d policies named, want %d: %s", n, maxEjectedNamed, cond.Message)
	}
	if !strings.Contains(cond.Message, "and 2 more") || cond.ObservedGeneration != 3 {
		t.Errorf("message %q (observedGeneration %d); want the 2 others counted, generation 3", cond.Message, cond.ObservedGeneration)
	}
	if cond := policyEjectedCondition(rr, &placement{runs: &hintsconfig.Role{}, pods: podCount{total: 2}}); cond != nil {
		t.Errorf("PolicyEjected %+v with nothing ejected; want none", cond)
	}
}
