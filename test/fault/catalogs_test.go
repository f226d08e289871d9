package fault

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
)

// managerMemoryLimit is config/manager's limits.memory; the manager must
// stay under half of it under the worst declarations a namespace can
// submit.
const managerMemoryLimit = 256 << 20

// manyRulesCatalog is a declared catalog of one worker selection and
// types hint types, each with rules CEL rules on its one parameter: the
// shape of the probe (128 types x 15 rules, 139 KB; x 125 rules,
// 1.05 MB, as much as a ConfigMap holds), made distinct by tag (its
// name) so that no two share the cache.
func manyRulesCatalog(tag string, types, rules int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: hints.kvrouter.io/v1alpha1\nkind: PolicyCatalog\nmetadata:\n  name: %s\nworkerSelections:\n  - type: sel\nhints:\n", tag)
	for i := range types {
		fmt.Fprintf(&b, "  - type: t%d\n    parameters:\n      type: object\n      properties:\n        p: {type: integer, default: 0}\n      x-kubernetes-validations:\n", i)
		for j := range rules {
			fmt.Fprintf(&b, "        - {rule: \"self.p != %d\", message: \"p may not be %d\"}\n", i*1000+j, j)
		}
	}
	return b.String()
}

// procMemory reads a process's resident set and its peak (VmRSS, VmHWM)
// in MiB from /proc.
func procMemory(pid int) (rss, hwm float64, err error) {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		for key, v := range map[string]*float64{"VmRSS:": &rss, "VmHWM:": &hwm} {
			if rest, ok := strings.CutPrefix(line, key); ok {
				kb, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(rest), " kB"))
				*v = float64(kb) / 1024
			}
		}
	}
	return rss, hwm, nil
}

// memSampler reads a process's VmRSS every 50 ms until stopped, and keeps
// the largest, and the last VmHWM (the kernel's peak, which sees what
// falls between two samples).
type memSampler struct {
	mu             sync.Mutex
	rss, hwm       float64
	samples        int
	stop, finished chan struct{}
}

func sampleMemory(pid int) *memSampler {
	s := &memSampler{stop: make(chan struct{}), finished: make(chan struct{})}
	go func() {
		defer close(s.finished)
		for {
			if rss, hwm, err := procMemory(pid); err == nil {
				s.mu.Lock()
				s.rss, s.hwm = max(s.rss, rss), max(s.hwm, hwm)
				s.samples++
				s.mu.Unlock()
			}
			select {
			case <-s.stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	return s
}

// end stops the sampler and returns the peak VmRSS and VmHWM seen.
func (s *memSampler) end() (rss, hwm float64, samples int) {
	close(s.stop)
	<-s.finished
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rss, s.hwm, s.samples
}

// goodRouterCompiled creates a RouterRole of the linked catalog in
// namespace and returns how long it took from its create to its being
// accepted for its generation and in its router's compiled ConfigMap.
func goodRouterCompiled(t *testing.T, c client.Client, namespace, router string) time.Duration {
	t.Helper()
	ctx := context.Background()
	rr := &v1alpha1.RouterRole{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: router + "-decode"},
		Spec: v1alpha1.RouterRoleSpec{Router: router, Role: "decode",
			WorkerSelection: v1alpha1.WorkerSelection{Type: "dynamo-default-cost-fn"}},
	}
	start := time.Now()
	if err := c.Create(ctx, rr); err != nil {
		t.Fatal(err)
	}
	var took time.Duration
	deadline := start.Add(30 * time.Second)
	for {
		var got v1alpha1.RouterRole
		var cm corev1.ConfigMap
		err := c.Get(ctx, client.ObjectKeyFromObject(rr), &got)
		if err == nil {
			cond := meta.FindStatusCondition(got.Status.Conditions, string(v1alpha1.ConditionAccepted))
			switch {
			case cond == nil || cond.ObservedGeneration != got.Generation:
				err = errors.New("not yet reported")
			case cond.Status != metav1.ConditionTrue:
				t.Fatalf("%s/%s not accepted: %s: %s", namespace, rr.Name, cond.Reason, cond.Message)
			default:
				err = c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: v1alpha1.HintsConfigMapName(router)}, &cm)
			}
		}
		if err == nil && strings.Contains(cm.Data[v1alpha1.HintsConfigKey], "decode:") {
			took = time.Since(start)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s/%s not compiled within 30 s: %v", namespace, rr.Name, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return took
}

// TestTenantCatalogsBoundManagerMemory: the attack on the real
// manager, cluster-wide, against a real kube-apiserver. In one tenant
// namespace, eleven routers each declare a catalog: one of 128 types x 125
// CEL rules (about 1 MB, the most a ConfigMap holds) and ten of 128 types x
// 15 rules (139 KB each), all distinct, with a RouterRole each and a
// HintPolicy of a declared type. Before the budget this took the manager
// from 55 to 1,087 MiB, a router in another namespace compiled in 12.1 s,
// and after a restart it was at 966 MiB within 16 s: an OOM-kill at every
// start against config/manager's 256Mi. Now:
//   - each tenant RouterRole is Accepted=False, InvalidCatalog, naming the
//     budget's limit and its flag;
//   - the manager's VmRSS, sampled every 50 ms while they load, and its
//     VmHWM stay under half the shipped limit (128 MiB), and so do the
//     restarted manager's for 15 s after it was killed and started again;
//   - a router in another namespace, created meanwhile and again after
//     the restart, is accepted and compiled soon after its create: the
//     log says how long it took (the goal is 1 s; the test fails
//     past 5 s, which a reconcile held behind the loads exceeds).
//
// KVHINT_FAULT_MANAGER_FLAGS adds flags to the manager: with the budget's
// limits at 0 (no limit) this test fails, as the figures say.
func TestTenantCatalogsBoundManagerMemory(t *testing.T) {
	// A control plane and a manager of its own, and windows of fixed
	// length: it runs beside TestRegexCatalogManagerRSS, after the
	// sequential tests (TestAPIServerOutage finds its kube-apiserver as
	// this process's child, so no other may run then).
	t.Parallel()
	cp := testenv.Start(t, testenv.Options{Name: "fault", ProductCRDs: true})
	c := cp.Client
	ctx := context.Background()
	const tenant, atBudget, other = "tenant", "tenant-b", "other"
	for _, ns := range []string{tenant, atBudget, other} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}

	// The manager as config/manager runs it, watching every namespace:
	// no GOMEMLIMIT, the default budget.
	mgr, startManager := startFaultManager(t, cp)
	pid := startManager()
	baseRSS, _, err := procMemory(pid)
	if err != nil {
		t.Fatal(err)
	}

	// The tenant's declarations: one of about 1 MB, ten of 139 KB, each
	// over the budget of one declaration. The second tenant's: eleven at
	// that budget (8 types x 16 rules, 128 rules), which each load, until
	// the memory budget of the namespace (16 MiB, about three of them)
	// refuses the rest.
	type decl struct {
		namespace, router, text string
		// refusal the RouterRole's Accepted=False message must hold; ""
		// also takes Accepted=True.
		refusal string
	}
	decls := []decl{{tenant, "big", manyRulesCatalog("big", 128, 125), "over the budget"}}
	for i := range 10 {
		decls = append(decls, decl{tenant, fmt.Sprint("mid", i), manyRulesCatalog(fmt.Sprint("mid", i), 128, 15), "over the budget"})
	}
	for i := range 11 {
		decls = append(decls, decl{atBudget, fmt.Sprint("full", i), manyRulesCatalog(fmt.Sprint("full", i), 8, 16), ""})
	}
	t.Logf("declarations: in %s one of %d bytes and ten of %d bytes; in %s eleven of %d bytes", tenant, len(decls[0].text), len(decls[1].text), atBudget, len(decls[11].text))

	mem := sampleMemory(pid)
	for _, d := range decls {
		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: d.namespace, Name: d.router + "-catalog",
				Labels: map[string]string{v1alpha1.CatalogForLabel: d.router}},
			Data: map[string]string{v1alpha1.CatalogKey: d.text},
		}
		if err := c.Create(ctx, cm); err != nil {
			t.Fatalf("creating %s: %v", cm.Name, err)
		}
		rr := &v1alpha1.RouterRole{
			ObjectMeta: metav1.ObjectMeta{Namespace: d.namespace, Name: d.router + "-decode"},
			Spec: v1alpha1.RouterRoleSpec{Router: d.router, Role: "decode",
				WorkerSelection: v1alpha1.WorkerSelection{Type: "sel"}},
		}
		if err := c.Create(ctx, rr); err != nil {
			t.Fatal(err)
		}
	}
	// A HintPolicy of a type only the declarations hold, in each: the
	// manager reads every declaration of the namespace for it.
	for _, ns := range []string{tenant, atBudget} {
		hp := &v1alpha1.HintPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "declared"},
			Spec: v1alpha1.HintPolicySpec{Type: "t0"}}
		if err := c.Create(ctx, hp); err != nil {
			t.Fatal(err)
		}
	}
	goodTook := goodRouterCompiled(t, c, other, "good")

	// Each tenant role refused for the budget, naming its limit and
	// flag, or (at the budget) accepted. Not fatal: the memory figures
	// are checked whatever the outcome.
	settled := func(what string) {
		t.Helper()
		examples := map[string]string{}
		accepted := 0
		err := testenv.Poll(60*time.Second, func(context.Context) error {
			accepted = 0
			for _, d := range decls {
				var rr v1alpha1.RouterRole
				if err := c.Get(ctx, client.ObjectKey{Namespace: d.namespace, Name: d.router + "-decode"}, &rr); err != nil {
					return err
				}
				cond := meta.FindStatusCondition(rr.Status.Conditions, string(v1alpha1.ConditionAccepted))
				if cond == nil || cond.ObservedGeneration != rr.Generation {
					return fmt.Errorf("%s/%s not reported yet", d.namespace, rr.Name)
				}
				if cond.Status == metav1.ConditionTrue && d.refusal == "" {
					accepted++
					continue
				}
				if cond.Status != metav1.ConditionFalse || cond.Reason != string(v1alpha1.ReasonInvalidCatalog) ||
					!strings.Contains(cond.Message, d.refusal) || !strings.Contains(cond.Message, "--catalog-max-") {
					return fmt.Errorf("%s/%s: Accepted %s, %s: %.300s; want False, InvalidCatalog naming the budget's limit and flag", d.namespace, rr.Name, cond.Status, cond.Reason, cond.Message)
				}
				examples[d.namespace] = cond.Message
			}
			return nil
		})
		if err != nil {
			t.Errorf("%s: not within 60 s: %v", what, err)
			return
		}
		t.Logf("%s: %d of the %d at the budget accepted; a refusal in %s says: %.300s; in %s: %.300s",
			what, accepted, 11, tenant, examples[tenant], atBudget, examples[atBudget])
	}
	settled("every tenant RouterRole refused for the budget or accepted")
	for _, ns := range []string{tenant, atBudget} {
		var hp v1alpha1.HintPolicy
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "declared"}, &hp); err != nil {
			t.Fatal(err)
		}
		if cond := meta.FindStatusCondition(hp.Status.Conditions, string(v1alpha1.ConditionAccepted)); cond != nil {
			t.Logf("HintPolicy %s/%s: Accepted %s, %s: %.200s", ns, hp.Name, cond.Status, cond.Reason, cond.Message)
		}
	}
	rss, hwm, n := mem.end()
	t.Logf("manager: VmRSS %.1f MiB at start; while the tenants' catalogs loaded, peak VmRSS %.1f MiB over %d samples, VmHWM %.1f MiB; a router in namespace %s compiled %v after its create",
		baseRSS, rss, n, hwm, other, goodTook.Round(time.Millisecond))

	// Killed, as the OOM killer would, and started again: it reads every
	// declaration again at start.
	mgr.Kill()
	restarted := time.Now()
	pid = startManager()
	mem = sampleMemory(pid)
	up := time.Since(restarted)
	goodAfter := goodRouterCompiled(t, c, other, "good-after")
	settled("after the restart, every tenant RouterRole still refused or accepted")
	if rest := 15*time.Second - time.Since(restarted); rest > 0 {
		time.Sleep(rest)
	}
	rssAfter, hwmAfter, nAfter := mem.end()
	t.Logf("restarted manager ready after %v; over its first %v, peak VmRSS %.1f MiB over %d samples, VmHWM %.1f MiB; a router in namespace %s compiled %v after its create",
		up.Round(time.Millisecond), time.Since(restarted).Round(time.Second), rssAfter, nAfter, hwmAfter, other, goodAfter.Round(time.Millisecond))

	half := float64(managerMemoryLimit>>20) / 2
	if hwm >= half || rss >= half {
		t.Errorf("while the tenant's catalogs loaded the manager peaked at VmRSS %.0f MiB, VmHWM %.0f MiB: not under %.0f MiB, half its shipped limit", rss, hwm, half)
	}
	if hwmAfter >= half || rssAfter >= half {
		t.Errorf("after its restart the manager peaked at VmRSS %.0f MiB, VmHWM %.0f MiB: not under %.0f MiB, half its shipped limit", rssAfter, hwmAfter, half)
	}
	// The bound for a router of another namespace is 1 s, and the
	// figures in docs/benchmarks.md are measured against it; a timed
	// test on a shared two-core machine asserts only what tells the
	// defect apart (a reconcile held behind the tenant's loads took
	// 12.1 s, and over 30 s with the budget off): 5 s. The log above
	// gives the time taken.
	for _, took := range []time.Duration{goodTook, goodAfter} {
		if took > 5*time.Second {
			t.Errorf("a router in another namespace compiled %v after its create: held behind the tenant's catalogs (the goal is 1 s)", took.Round(time.Millisecond))
		}
	}
}
