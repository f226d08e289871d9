package samples_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/testing/invalidsamples"
	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
)

// TestInvalidSamples applies each file of config/samples/invalid in a
// namespace of its own and checks the reason it gets: a condition for the
// catalog and graph rules, the API server's refusal for the rules the CRD
// enforces.
func TestInvalidSamples(t *testing.T) {
	env := testenv.Get(t)
	dir := filepath.Join(env.Repo, invalidsamples.Dir)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !slices.ContainsFunc(invalidsamples.All, func(s invalidsamples.Sample) bool { return s.File == e.Name() }) {
			t.Errorf("%s/%s has no expectation in invalidsamples.All", invalidsamples.Dir, e.Name())
		}
	}
	applied := map[string]string{} // file -> namespace
	for _, s := range invalidsamples.All {
		t.Run(strings.TrimSuffix(s.File, ".yaml")+"/"+s.Object, func(t *testing.T) {
			ns, ok := applied[s.File]
			if !ok {
				ns = testenv.NewNamespace(t, env.Client, "kvhint-test")
				applied[s.File] = ns
				_, err := testenv.CreateFile(t, k8s, ns, filepath.Join(dir, s.File))
				switch {
				case s.Rejected != "" && err == nil:
					t.Fatalf("the API server accepted it; want %q", s.Rejected)
				case s.Rejected != "" && !apierrors.IsInvalid(err):
					t.Fatalf("got %v; want an Invalid error", err)
				case s.Rejected != "" && !strings.Contains(err.Error(), s.Rejected):
					t.Fatalf("server said:\n  %v\nwant it to contain:\n  %s", err, s.Rejected)
				case s.Rejected == "" && err != nil:
					t.Fatalf("refused: %v", err)
				}
			}
			if s.Rejected != "" {
				return
			}
			var obj client.Object = &v1alpha1.RouterRole{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: s.Object}}
			if s.Policy {
				obj = &v1alpha1.HintPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: s.Object}}
			}
			waitFalse := func(typ v1alpha1.ConditionType, reason v1alpha1.ConditionReason) {
				t.Helper()
				want := testenv.Want{Status: metav1.ConditionFalse, Reason: string(reason)}
				if typ == v1alpha1.ConditionProgrammed {
					// Programmed reports the generation that runs.
					want.Generation = testenv.AnyGeneration
				}
				testenv.WaitCondition(t, k8s, timeout, obj, string(typ), want)
			}
			waitFalse(s.Condition, s.Reason)
			for typ, reason := range s.Also {
				waitFalse(typ, reason)
			}
			if !s.Policy {
				// Ready repeats the reason of the first condition that fails.
				first := s.Reason
				if r, ok := s.Also[v1alpha1.ConditionAccepted]; ok {
					first = r
				}
				testenv.WaitCondition(t, k8s, timeout, obj, string(v1alpha1.ConditionReady), testenv.Want{Status: metav1.ConditionFalse, Reason: string(first)})
			}
		})
	}
}
