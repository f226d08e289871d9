package fault

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
)

// regexCatalog is the pattern catalog: types hint types of props
// string parameters each, every one with a pattern of its own whose
// compiled program is large for its text ([a-z]{1,1000}, some 2,000
// instructions from 14 bytes) and a default that matches it. 15 x 100 is
// the 1,500 distinct patterns in 126 KB; tag makes two texts
// distinct.
func regexCatalog(tag string, types, props int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: hints.kvrouter.io/v1alpha1\nkind: PolicyCatalog\nmetadata:\n  name: %s\nworkerSelections:\n  - type: sel\nhints:\n", tag)
	for t := range types {
		fmt.Fprintf(&b, "  - type: h%d\n    parameters:\n      type: object\n      properties:\n", t)
		for p := range props {
			n := t*props + p
			fmt.Fprintf(&b, "        p%d: {type: string, pattern: '^[a-z]{1,1000}%s%d$', default: a%s%d}\n", p, tag, n, tag, n)
		}
	}
	return b.String()
}

// TestRegexCatalogManagerRSS is the F2 probe on the real manager
// binary against a real kube-apiserver: two ConfigMaps, each a distinct
// 1,500-pattern catalog, applied one after the other with a RouterRole
// each, then deleted. It logs the manager's VmRSS before, after each, and
// after the deletion, and the peak (VmHWM). Filed figures: 65, 379, 734
// MiB, and 735 MiB after everything was deleted. Each role must be
// refused for the budget (InvalidCatalog naming --catalog-max-memory),
// and the manager must stay under half of its 256Mi limit throughout.
func TestRegexCatalogManagerRSS(t *testing.T) {
	// Its own control plane and manager, and settling sleeps: beside
	// TestTenantCatalogsBoundManagerMemory (see there).
	t.Parallel()
	cp := testenv.Start(t, testenv.Options{Name: "fault", ProductCRDs: true})
	c := cp.Client
	ctx := context.Background()
	const ns = "tenant"
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	_, startManager := startFaultManager(t, cp)
	pid := startManager()
	// settled reads VmRSS once the manager has had a moment with nothing
	// to do.
	settled := func() float64 {
		t.Helper()
		time.Sleep(3 * time.Second)
		rss, _, err := procMemory(pid)
		if err != nil {
			t.Fatal(err)
		}
		return rss
	}
	figures := []string{fmt.Sprintf("before %.0f MiB", settled())}
	mem := sampleMemory(pid)

	var objs []client.Object
	for _, tag := range []string{"x", "y"} {
		text := regexCatalog(tag, 15, 100)
		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "patterns-" + tag,
				Labels: map[string]string{v1alpha1.CatalogForLabel: "r" + tag}},
			Data: map[string]string{v1alpha1.CatalogKey: text},
		}
		rr := &v1alpha1.RouterRole{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "r" + tag + "-decode"},
			Spec:       v1alpha1.RouterRoleSpec{Router: "r" + tag, Role: "decode", WorkerSelection: v1alpha1.WorkerSelection{Type: "sel"}},
		}
		for _, o := range []client.Object{cm, rr} {
			if err := c.Create(ctx, o); err != nil {
				t.Fatal(err)
			}
		}
		objs = append(objs, cm, rr)
		var msg string
		err := testenv.Poll(60*time.Second, func(context.Context) error {
			if err := c.Get(ctx, client.ObjectKeyFromObject(rr), rr); err != nil {
				return err
			}
			cond := meta.FindStatusCondition(rr.Status.Conditions, string(v1alpha1.ConditionAccepted))
			if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != string(v1alpha1.ReasonInvalidCatalog) || !strings.Contains(cond.Message, "--catalog-max-memory") {
				return fmt.Errorf("Accepted: %+v", cond)
			}
			msg = cond.Message
			return nil
		})
		if err != nil {
			t.Errorf("RouterRole %s: not refused for the budget within 60 s: %v", rr.Name, err)
		}
		figures = append(figures, fmt.Sprintf("after %s (%d bytes) %.0f MiB", cm.Name, len(text), settled()))
		t.Logf("%s: %.300s", rr.Name, msg)
	}
	for _, o := range objs {
		if err := c.Delete(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	figures = append(figures, fmt.Sprintf("after both were deleted %.0f MiB", settled()))
	peak, hwm, samples := mem.end()
	t.Logf("manager VmRSS: %s; peak %.0f MiB sampled (%d samples), VmHWM %.0f MiB", strings.Join(figures, ", "), peak, samples, hwm)
	if limit := float64(managerMemoryLimit>>20) / 2; hwm >= limit {
		t.Errorf("the manager's VmHWM reached %.0f MiB, at or over half its %d MiB limit", hwm, managerMemoryLimit>>20)
	}
}
