package declared

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/pkg/hints/builtin"
)

// TestPolicyStatusLinkedOnly: without a store, a HintPolicy is checked
// against the linked catalog alone: a linked type is Accepted, any other
// is UnknownHintType.
func TestPolicyStatusLinkedOnly(t *testing.T) {
	var none *Store
	for typ, want := range map[string]string{"kv-fetch": "", "harness_prefetch": string(v1alpha1.ReasonUnknownHintType)} {
		hp := &v1alpha1.HintPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}, Spec: v1alpha1.HintPolicySpec{Type: typ}}
		st, err := none.PolicyStatus(context.Background(), builtin.NewCatalog(), hp, []string{"role"}, metav1.Now())
		if err != nil {
			t.Fatal(err)
		}
		c := meta.FindStatusCondition(st.Conditions, string(v1alpha1.ConditionAccepted))
		switch {
		case c == nil:
			t.Errorf("%s: no Accepted condition in %+v", typ, st)
		case want == "" && c.Status != metav1.ConditionTrue:
			t.Errorf("%s: Accepted %s (%s: %s); want True", typ, c.Status, c.Reason, c.Message)
		case want != "" && (c.Status != metav1.ConditionFalse || c.Reason != want):
			t.Errorf("%s: Accepted %s, reason %s; want False, %s", typ, c.Status, c.Reason, want)
		}
	}
}
