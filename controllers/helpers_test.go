package controllers_test

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
)

// newRole returns a RouterRole with no hints key (defaults run).
func newRole(ns, name, router, role, selection string) *v1alpha1.RouterRole {
	return &v1alpha1.RouterRole{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.RouterRoleSpec{
			Router:          router,
			Role:            role,
			WorkerSelection: v1alpha1.WorkerSelection{Type: selection},
		},
	}
}

// update re-reads obj, applies change and writes it back, retrying on a
// conflict with the manager's status writes.
func update[T client.Object](t *testing.T, obj T, change func(T)) {
	t.Helper()
	testenv.Update(t, k8s, timeout, obj, change)
}

func rawMergePatch(data []byte) client.Patch { return client.RawPatch(types.MergePatchType, data) }
