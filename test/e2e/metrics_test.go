package e2e

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// TestManagerMetricsNeedAuthorizedToken is issue item 7: the manager's
// metrics were plain HTTP, open to anyone who could reach the port. Now
// they are HTTPS; a caller without a token gets 401, a token whose account
// may not get /metrics gets 403, and a token of an account bound to
// config/rbac's kvhint-metrics-reader (what a Prometheus needs) gets the
// metrics.
func TestManagerMetricsNeedAuthorizedToken(t *testing.T) {
	requireEnv(t)
	ctx := context.Background()
	cs, err := kubernetes.NewForConfig(env.CP.Config)
	if err != nil {
		t.Fatal(err)
	}
	kubectl(t, "", "apply", "-f", filepath.Join(repo, "config/rbac/metrics_reader_role.yaml"))
	for _, sa := range []string{"prometheus", "nosy"} {
		_, err := cs.CoreV1().ServiceAccounts(namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	kubectl(t, "", "create", "clusterrolebinding", "e2e-prometheus-kvhint-metrics",
		"--clusterrole=kvhint-metrics-reader", "--serviceaccount="+namespace+":prometheus")
	token := func(sa string) string {
		tr, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, sa, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("TokenRequest for %s: %v", sa, err)
		}
		return tr.Status.Token
	}

	// The certificate is the self-signed one the manager makes when it is
	// given none; what is tested here is who gets the metrics.
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	scrape := func(url, bearer string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := hc.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return resp.StatusCode, string(body)
	}

	plain := strings.Replace(env.MetricsURL, "https://", "http://", 1)
	if code, body := scrape(plain, ""); code == http.StatusOK {
		t.Errorf("plain HTTP without a token: 200, metrics served to anyone:\n%.300s", body)
	}
	if code, body := scrape(env.MetricsURL, ""); code != http.StatusUnauthorized {
		t.Errorf("HTTPS without a token: %d %q; want 401", code, body)
	}
	if code, body := scrape(env.MetricsURL, token("nosy")); code != http.StatusForbidden {
		t.Errorf("HTTPS with a token not allowed /metrics: %d %q; want 403", code, body)
	}
	// RBAC changes reach the authorizer at once, but the manager caches
	// review answers for a while; the reader's first answer is fresh.
	code, body := scrape(env.MetricsURL, token("prometheus"))
	if code != http.StatusOK || !strings.Contains(body, "controller_runtime_reconcile_total") {
		t.Errorf("HTTPS with a kvhint-metrics-reader token: %d; want 200 with controller-runtime metrics:\n%.300s", code, body)
	}
}
