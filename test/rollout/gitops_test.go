package rollout

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
)

// writeManifest writes objects as a YAML manifest, as a Git repository
// holds them, and returns its path.
func writeManifest(t *testing.T, objs ...client.Object) string {
	t.Helper()
	var out []byte
	for _, o := range objs {
		data, err := yaml.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		out = append(append(out, "---\n"...), data...)
	}
	path := filepath.Join(t.TempDir(), "manifest.yaml")
	if err := os.WriteFile(path, out, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestForcedReapplyKeepsTheEntries is what Flux's kustomize-controller
// does at every sync: apply the unchanged manifest server-side, with
// --force-conflicts, under a field manager of its own. The manager's
// three entries are not in the manifest, so the re-apply leaves them
// alone: the Deployment's generation does not move and no pod is
// replaced.
func TestForcedReapplyKeepsTheEntries(t *testing.T) {
	ns := newCatalogNamespace(t)
	rr := testenv.RouterRole(ns, "decode", "llama", v1alpha1.RoleDecode, retain(60))
	testenv.Create(t, k8s, rr)
	dep := testenv.RouterDeployment(ns, "llama", 3)
	dep.TypeMeta = metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"}
	manifest := writeManifest(t, dep)
	flux := func() {
		testenv.Get(t).Kubectl(t, "apply", "--server-side", "--force-conflicts", "--field-manager=kustomize-controller", "-f", manifest)
	}
	flux()
	waitProgrammed(t, rr, metav1.ConditionTrue, v1alpha1.ReasonProgrammed, "3/3 router pods run ", rr.Generation)
	rev := v1alpha1.RevisionConfigMapName("llama", hashOf(t, rr))
	requirePodsOn(t, ns, 3, rev)
	if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(dep), dep); err != nil {
		t.Fatal(err)
	}
	gen := dep.Generation
	before := livePods(t, ns)

	for range 3 {
		flux()
		// The apply is stored when kubectl returns: had it taken an
		// entry away, the generation would have moved by now.
		got := &appsv1.Deployment{}
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(dep), got); err != nil {
			t.Fatal(err)
		}
		if got.Generation != gen || policyConfigMap(&got.Spec.Template.Spec) != rev {
			t.Fatalf("after the forced re-apply the Deployment is at generation %d mounting %q; want generation %d mounting %s",
				got.Generation, policyConfigMap(&got.Spec.Template.Spec), gen, rev)
		}
	}
	requireOnlyVolumeWritten(t, dep)

	// A change of the role after the syncs is one rollout: the manager
	// had nothing to set back.
	gen2 := setTTL(t, rr, retain(120))
	waitProgrammed(t, rr, metav1.ConditionTrue, v1alpha1.ReasonProgrammed, "3/3 router pods run ", gen2)
	if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(dep), dep); err != nil {
		t.Fatal(err)
	}
	if dep.Generation != gen+1 {
		t.Errorf("one change after three syncs took the Deployment from generation %d to %d; want one step", gen, dep.Generation)
	}
	for _, old := range before {
		found := false
		for _, p := range livePods(t, ns) {
			found = found || p.UID == old.UID
		}
		if found {
			t.Errorf("pod %s was not replaced by the change", old.Name)
		}
	}
	flux()
	if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(dep), dep); err != nil {
		t.Fatal(err)
	}
	if dep.Generation != gen+1 {
		t.Errorf("a sync after the change moved the Deployment to generation %d; want %d", dep.Generation, gen+1)
	}
}
