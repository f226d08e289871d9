package rollout

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
	"github.com/kvrouter/kv-hint-operator/test/dynamo"
	"github.com/kvrouter/kv-hint-operator/test/dynamo/v1beta1"
)

// BenchmarkRollout measures, for 3 and 30 replicas (maxSurge 25%), the
// time from a RouterRole change to every router pod Ready on the new
// config (Programmed n/n with the new hash), and the manager's API writes
// per change. Its floor is the same Deployment rolled by a template change
// made directly (a pod annotation), timed to the same end (every replica
// updated and Ready): the part of the time that is the Deployment
// controller's and kwok's, not the manager's. hack/bench-rollout.sh runs
// it.
func BenchmarkRollout(b *testing.B) {
	testenv.Get(b)
	for _, n := range []int32{3, 30} {
		b.Run(fmt.Sprintf("replicas=%d", n), func(b *testing.B) {
			_, rr, _ := benchRouter(b, n)
			b.ReportAllocs()
			before := writesSnapshot()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				gen := benchSetTTL(b, rr, 1000+i)
				benchWaitProgrammed(b, rr, gen, n)
			}
			b.StopTimer()
			after := writesSnapshot()
			b.ReportMetric(float64(sumWrites(after)-sumWrites(before))/float64(b.N), "writes/change")
			b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/change")
			for k, v := range after {
				if d := v - before[k]; d > 0 {
					b.Logf("%d changes: %d × %s", b.N, d, k)
				}
			}
		})
		b.Run(fmt.Sprintf("replicas=%d/floor", n), func(b *testing.B) {
			_, _, dep := benchRouter(b, n)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				var gen int64
				benchWait(b, "template change", func(ctx context.Context) (bool, error) {
					if err := k8s.Get(ctx, client.ObjectKeyFromObject(dep), dep); err != nil {
						return false, err
					}
					if dep.Spec.Template.Annotations == nil {
						dep.Spec.Template.Annotations = map[string]string{}
					}
					dep.Spec.Template.Annotations["bench/iteration"] = strconv.Itoa(i)
					if err := k8s.Update(ctx, dep); err != nil {
						return false, nil
					}
					gen = dep.Generation
					return true, nil
				})
				benchWait(b, "the rollout done", func(ctx context.Context) (bool, error) {
					if err := k8s.Get(ctx, client.ObjectKeyFromObject(dep), dep); err != nil {
						return false, err
					}
					s := dep.Status
					return s.ObservedGeneration >= gen && s.UpdatedReplicas == n && s.ReadyReplicas == n && s.Replicas == n, nil
				})
			}
			b.StopTimer()
			b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/change")
		})
	}
}

// benchRouter starts an n-replica router and waits until all its pods
// run its first config.
func benchRouter(b *testing.B, n int32) (string, *v1alpha1.RouterRole, *appsv1.Deployment) {
	b.Helper()
	var dep *appsv1.Deployment
	ns, rr := benchStart(b, func(ns string) client.Object {
		dep = testenv.RouterDeployment(ns, "llama", n)
		return dep
	})
	benchWait(b, "the first rollout done", func(ctx context.Context) (bool, error) {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(dep), dep); err != nil {
			return false, err
		}
		s := dep.Status
		return s.ObservedGeneration == dep.Generation && s.UpdatedReplicas == n && s.ReadyReplicas == n && s.Replicas == n, nil
	})
	return ns, rr, dep
}

// benchStart creates a namespace with the benchmarks' decode role and the
// router workload that workload returns for it, and waits until the role
// is Programmed: its first config on every pod.
func benchStart(b *testing.B, workload func(ns string) client.Object) (string, *v1alpha1.RouterRole) {
	b.Helper()
	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "kvhint-bench-"}}
	if err := k8s.Create(context.Background(), nsObj); err != nil {
		b.Fatal(err)
	}
	rr := testenv.RouterRole(nsObj.Name, "decode", "llama", v1alpha1.RoleDecode, retain(60))
	for _, o := range []client.Object{rr, workload(nsObj.Name)} {
		if err := k8s.Create(context.Background(), o); err != nil {
			b.Fatal(err)
		}
	}
	benchWait(b, "the first config on every pod", func(ctx context.Context) (bool, error) {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(rr), rr); err != nil {
			return false, err
		}
		c := findCondition(rr, v1alpha1.ConditionProgrammed)
		return c != nil && c.Status == metav1.ConditionTrue, nil
	})
	return nsObj.Name, rr
}

func benchSetTTL(b *testing.B, rr *v1alpha1.RouterRole, ttl int) int64 {
	b.Helper()
	benchWait(b, "updating the RouterRole", func(ctx context.Context) (bool, error) {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(rr), rr); err != nil {
			return false, err
		}
		rr.Spec.Hints = []v1alpha1.HintItem{retain(ttl)}
		return k8s.Update(ctx, rr) == nil, nil
	})
	return rr.Generation
}

// benchWaitProgrammed waits until generation gen of the role is
// Programmed on all n router pods.
func benchWaitProgrammed(b *testing.B, rr *v1alpha1.RouterRole, gen int64, n int32) {
	b.Helper()
	benchWait(b, "Programmed with the new hash on every pod", func(ctx context.Context) (bool, error) {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(rr), rr); err != nil {
			return false, err
		}
		p := rr.Status.RouterPods
		c := findCondition(rr, v1alpha1.ConditionProgrammed)
		return c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == gen && p != nil && p.UpToDate == n && p.Total == n, nil
	})
}

func benchWait(b *testing.B, what string, cond wait.ConditionWithContextFunc) {
	b.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, timeout, true, cond); err != nil {
		b.Fatalf("%s: %v", what, err)
	}
}

func sumWrites(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func findCondition(rr *v1alpha1.RouterRole, t v1alpha1.ConditionType) *metav1.Condition {
	return meta.FindStatusCondition(rr.Status.Conditions, string(t))
}

// BenchmarkGraphRollout is BenchmarkRollout for a DynamoGraphDeployment:
// for 3 and 30 Frontend replicas, the time from a RouterRole change to
// every Frontend pod Ready on the new config (Programmed n/n, which also
// waits for the DGD's status to say its rollout is over), through the
// manager's write to the DGD and the stand-in for Dynamo's operator. Its
// floor is the same change of the DGD made by hand (an annotation of the
// frontend's pod template), timed to the same end (the DGD's status:
// generation observed, Ready, the frontend's replicas all updated and
// ready). hack/bench-rollout.sh runs it.
func BenchmarkGraphRollout(b *testing.B) {
	testenv.Get(b)
	for _, n := range []int32{3, 30} {
		b.Run(fmt.Sprintf("replicas=%d", n), func(b *testing.B) {
			rr, _ := benchGraph(b, n)
			b.ReportAllocs()
			before := writesSnapshot()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				gen := benchSetTTL(b, rr, 1000+i)
				benchWaitProgrammed(b, rr, gen, n)
			}
			b.StopTimer()
			after := writesSnapshot()
			b.ReportMetric(float64(sumWrites(after)-sumWrites(before))/float64(b.N), "writes/change")
			b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/change")
		})
		b.Run(fmt.Sprintf("replicas=%d/floor", n), func(b *testing.B) {
			_, g := benchGraph(b, n)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				var gen int64
				benchWait(b, "template change of the DGD", func(ctx context.Context) (bool, error) {
					if err := k8s.Get(ctx, client.ObjectKeyFromObject(g), g); err != nil {
						return false, err
					}
					tmpl := g.Spec.Components[0].PodTemplate
					if tmpl.Annotations == nil {
						tmpl.Annotations = map[string]string{}
					}
					tmpl.Annotations["bench/iteration"] = strconv.Itoa(i)
					if err := k8s.Update(ctx, g); err != nil {
						return false, nil
					}
					gen = g.Generation
					return true, nil
				})
				benchWait(b, "the DGD's rollout done", func(ctx context.Context) (bool, error) {
					return graphRolledOut(ctx, g, gen, n)
				})
			}
			b.StopTimer()
			b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/change")
		})
	}
}

// graphRolledOut reports whether the DGD's status says generation gen
// rolled out to all n Frontend replicas.
func graphRolledOut(ctx context.Context, g *v1beta1.DynamoGraphDeployment, gen int64, n int32) (bool, error) {
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(g), g); err != nil {
		return false, err
	}
	st := g.Status
	c := meta.FindStatusCondition(st.Conditions, "Ready")
	fe, ok := st.Components[dynamo.FrontendComponent]
	return st.ObservedGeneration >= gen && c != nil && c.Status == metav1.ConditionTrue && ok &&
		fe.UpdatedReplicas == n && fe.Replicas == n && fe.ReadyReplicas != nil && *fe.ReadyReplicas == n, nil
}

// benchGraph starts an n-replica DGD router and waits until all its
// Frontend pods run its first config.
func benchGraph(b *testing.B, n int32) (*v1alpha1.RouterRole, *v1beta1.DynamoGraphDeployment) {
	b.Helper()
	var g *v1beta1.DynamoGraphDeployment
	_, rr := benchStart(b, func(ns string) client.Object {
		g = routerGraph(ns, n)
		return g
	})
	benchWait(b, "the first rollout done", func(ctx context.Context) (bool, error) {
		return graphRolledOut(ctx, g, g.Generation, n)
	})
	return rr, g
}
