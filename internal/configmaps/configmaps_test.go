package configmaps

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
)

// TestDeleteOnlyWhatTheManagerCreated: when a router has no RouterRoles
// left, its ConfigMap goes only if the manager created it (managed-by
// label or a RouterRole owner); a ConfigMap of the name that carries
// neither stays, with its keys.
func TestDeleteOnlyWhatTheManagerCreated(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cm      *corev1.ConfigMap
		deleted bool
	}{
		{"foreign", &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "r-hints", Namespace: "ns"}, Data: map[string]string{"other": "x"}}, false},
		{"labelled", &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "r-hints", Namespace: "ns",
			Labels: map[string]string{v1alpha1.ManagedByLabel: v1alpha1.ManagedBy}}}, true},
		{"owned by a RouterRole, labels edited away", &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "r-hints", Namespace: "ns",
			OwnerReferences: []metav1.OwnerReference{{APIVersion: v1alpha1.GroupVersion.String(), Kind: "RouterRole", Name: "a", UID: "u"}}}}, true},
		{"owned by something else", &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "r-hints", Namespace: "ns",
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "a", UID: "u"}}}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := fake.NewClientBuilder().WithObjects(tc.cm).Build()
			cm := &corev1.ConfigMap{}
			if err := c.Get(context.Background(), client.ObjectKeyFromObject(tc.cm), cm); err != nil {
				t.Fatal(err)
			}
			w := &Writer{Client: c, FieldOwner: "kvhint-manager"}
			if err := w.Delete(context.Background(), cm); err != nil {
				t.Fatal(err)
			}
			err := c.Get(context.Background(), client.ObjectKeyFromObject(tc.cm), &corev1.ConfigMap{})
			if gone := err != nil; gone != tc.deleted {
				t.Errorf("deleted: %v (err %v); want %v", gone, err, tc.deleted)
			}
		})
	}
}
