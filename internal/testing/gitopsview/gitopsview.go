// Package gitopsview computes what GitOps tools make of an object the
// API server serves: kstatus (Flux's health checks, kpt) and the Argo CD
// health check of config/argocd, run as Argo CD runs it. Only tests
// import it; it imports cli-utils' kstatus, the argocd and testenv test
// packages, the API types and controller-runtime's client.
package gitopsview

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/testing/argocd"
	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
)

// View is what the GitOps tools make of one object.
type View struct {
	KStatus status.Status
	// KStatusReason is the reason of kstatus's Stalled or Reconciling
	// condition, if any.
	KStatusReason  string
	KStatusMessage string
	Argo           string
	ArgoMessage    string
}

func (v View) String() string {
	return fmt.Sprintf("kstatus %s (%s: %s); Argo CD %s: %s", v.KStatus, v.KStatusReason, v.KStatusMessage, v.Argo, v.ArgoMessage)
}

// Read reads an object of the API's kind back from the API server as
// unstructured, the way Flux's and Argo CD's caches hold it, and computes
// both views.
func Read(t testing.TB, c client.Client, ns, name, kind string) View {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind(kind))
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, u); err != nil {
		t.Fatalf("reading %s %s: %v", kind, name, err)
	}
	return Of(t, u)
}

// Of computes both views of u.
func Of(t testing.TB, u *unstructured.Unstructured) View {
	t.Helper()
	res, err := status.Compute(u)
	if err != nil {
		t.Fatalf("kstatus on %s %s: %v", u.GetKind(), u.GetName(), err)
	}
	v := View{KStatus: res.Status, KStatusMessage: res.Message}
	if len(res.Conditions) > 0 {
		v.KStatusReason = res.Conditions[0].Reason
	}
	repo, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	v.Argo, v.ArgoMessage, err = argocd.Health(filepath.Join(repo, "config", "argocd"), u)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// Expect checks a view against what it should be: reason, when set, is
// kstatus's condition reason and starts Argo CD's message; message, when
// set, is in Argo CD's message and in kstatus's unless Current.
func Expect(t testing.TB, what string, got View, kstatus status.Status, argo, reason, message string) {
	t.Helper()
	if !got.matches(kstatus, argo, reason, message) {
		t.Errorf("%s: got %s\nwant kstatus %s, Argo CD %s, reason %q, message containing %q", what, got, kstatus, argo, reason, message)
	}
}

func (v View) matches(kstatus status.Status, argo, reason, message string) bool {
	ok := v.KStatus == kstatus && v.Argo == argo
	if reason != "" {
		ok = ok && v.KStatusReason == reason && strings.HasPrefix(v.ArgoMessage, reason+": ")
	}
	if message != "" {
		// kstatus says only "Resource is Ready" when Current.
		ok = ok && strings.Contains(v.ArgoMessage, message) && (kstatus == status.CurrentStatus || strings.Contains(v.KStatusMessage, message))
	}
	return ok
}

// Wait waits until the object's views settle on the expected ones (as
// Expect checks them) and returns them.
func Wait(t testing.TB, c client.Client, timeout time.Duration, ns, name, kind string, kstatus status.Status, argo, reason, message string) View {
	t.Helper()
	var got View
	testenv.Eventually(t, timeout, fmt.Sprintf("%s %s: kstatus %s, Argo CD %s, reason %s", kind, name, kstatus, argo, reason), func(context.Context) error {
		got = Read(t, c, ns, name, kind)
		if !got.matches(kstatus, argo, reason, message) {
			return fmt.Errorf("%s", got)
		}
		return nil
	})
	return got
}
