package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/dev/devenv"
	"github.com/kvrouter/kv-hint-operator/internal/dev/simworker"
	"github.com/kvrouter/kv-hint-operator/internal/sidecar/booking"
	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"
)

// kubectl runs the real kubectl (the one hack/envtest-assets.sh builds
// beside kube-apiserver) against the test control plane; stdin may be "".
func kubectl(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	bin := filepath.Join(env.CP.Assets, "kubectl")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("no kubectl beside kube-apiserver: %v", err)
	}
	cmd := exec.Command(bin, append([]string{"--namespace", namespace}, args...)...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+env.CP.Kubeconfig)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func routerRole(t *testing.T, name string) *v1alpha1.RouterRole {
	t.Helper()
	rr := &v1alpha1.RouterRole{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: name}, rr); err != nil {
		t.Fatal(err)
	}
	return rr
}

// condition returns a RouterRole's condition, or an error naming what is missing.
func condition(name string, typ v1alpha1.ConditionType) (*metav1.Condition, *v1alpha1.RouterRole, error) {
	rr := &v1alpha1.RouterRole{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: name}, rr); err != nil {
		return nil, nil, err
	}
	c := meta.FindStatusCondition(rr.Status.Conditions, string(typ))
	if c == nil {
		return nil, rr, fmt.Errorf("%s has no %s condition", name, typ)
	}
	return c, rr, nil
}

func waitCondition(t *testing.T, name string, typ v1alpha1.ConditionType, status metav1.ConditionStatus, reason string) *metav1.Condition {
	t.Helper()
	var got *metav1.Condition
	testenv.Eventually(t, 30*time.Second, fmt.Sprintf("%s %s=%s (%s)", name, typ, status, reason), func(context.Context) error {
		c, rr, err := condition(name, typ)
		if err != nil {
			return err
		}
		if c.Status != status || (reason != "" && c.Reason != reason) || c.ObservedGeneration != rr.Generation && typ != v1alpha1.ConditionProgrammed {
			return fmt.Errorf("%s=%s (%s) at generation %d of %d: %s", typ, c.Status, c.Reason, c.ObservedGeneration, rr.Generation, c.Message)
		}
		got = c
		return nil
	})
	return got
}

func configHash(t *testing.T, routerName string) string {
	t.Helper()
	var cm corev1.ConfigMap
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: v1alpha1.HintsConfigMapName(routerName)}, &cm); err != nil {
		t.Fatal(err)
	}
	return cm.Annotations[v1alpha1.HashAnnotation]
}

func appliedHash(t *testing.T, s *devenv.Sidecar) string {
	t.Helper()
	var pod corev1.Pod
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: s.PodName}, &pod); err != nil {
		t.Fatal(err)
	}
	return pod.Annotations[v1alpha1.AppliedHashAnnotation]
}

// bookingReply is what the sidecar answered to one booking.
type bookingReply struct {
	Status  int
	Outcome string
	Hash    string
	Body    string
}

func book(t *testing.T, s *devenv.Sidecar, body string) bookingReply {
	t.Helper()
	resp, err := http.Post(s.BookingURL+"/v1/bookings", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return bookingReply{Status: resp.StatusCode, Outcome: resp.Header.Get(booking.HeaderOutcome), Hash: resp.Header.Get(booking.HeaderConfigHash), Body: string(b)}
}

func worker(t *testing.T, id string) *devenv.Worker {
	t.Helper()
	for _, w := range env.Workers {
		if w.ID == id {
			return w
		}
	}
	t.Fatalf("no worker %s", id)
	return nil
}

// received returns the hint bodies a worker recorded, compacted.
func received(t *testing.T, w *devenv.Worker) []string {
	t.Helper()
	resp, err := http.Get(w.URL + "/hints")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got struct {
		Hints    []simworker.Received `json:"hints"`
		Rejected int                  `json:"rejected"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	if got.Rejected != 0 {
		t.Errorf("worker %s refused %d malformed hints", w.ID, got.Rejected)
	}
	out := []string{}
	for _, h := range got.Hints {
		var buf bytes.Buffer
		if err := json.Compact(&buf, h.Body); err != nil {
			t.Fatal(err)
		}
		out = append(out, buf.String())
	}
	return out
}

func forget(t *testing.T) {
	t.Helper()
	for _, w := range env.Workers {
		req, _ := http.NewRequest(http.MethodDelete, w.URL+"/hints", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
}

func podRef(name string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
}

func rawMerge(patch []byte) client.Patch { return client.RawPatch(types.MergePatchType, patch) }

func jsonParams(s string) *apiextensionsv1.JSON { return &apiextensionsv1.JSON{Raw: []byte(s)} }
