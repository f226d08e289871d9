package provider

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kvrouter/kv-hint-operator/internal/rolloutapi"
)

func TestPrometheusQueries(t *testing.T) {
	p, err := NewPrometheus(PrometheusOptions{Address: "http://prometheus.monitoring:9090/prom/", Step: 15 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	since := time.Unix(1_800_000_000, 0)
	qs, err := p.Queries(Query{Namespace: "inference", Router: "llama", Stable: stableHash, Candidate: candidateHash, Since: since}, since.Add(5*time.Minute+500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	sel := `{namespace="inference",router="llama",config_hash=~"00000000000000aa|00000000000000bb"}`
	want := Queries{
		Requests:       `sum by (config_hash, result) (increase(kvhint_outcome_requests_total` + sel + `[301s]))`,
		PromptTokens:   `sum by (config_hash) (increase(kvhint_outcome_prompt_tokens_total` + sel + `[301s]))`,
		CachedTokens:   `sum by (config_hash) (increase(kvhint_outcome_cached_tokens_total` + sel + `[301s]))`,
		TTFTP50:        `histogram_quantile(0.5, sum by (config_hash, le) (increase(kvhint_outcome_ttft_seconds_bucket` + sel + `[301s])))`,
		TTFTP90:        `histogram_quantile(0.9, sum by (config_hash, le) (increase(kvhint_outcome_ttft_seconds_bucket` + sel + `[301s])))`,
		ShadowBookings: `sum by (role, result) (increase(kvhint_shadow_bookings_total{namespace="inference",router="llama"}[301s]))`,
		ShadowActions:  `sum by (action) (increase(kvhint_shadow_action_diff_total{namespace="inference",router="llama"}[301s]))`,
		HitRatioSteps: `sum by (config_hash) (increase(kvhint_outcome_cached_tokens_total` + sel + `[15s]))` +
			` / sum by (config_hash) (increase(kvhint_outcome_prompt_tokens_total` + sel + `[15s]))`,
		TTFTP90Steps: `histogram_quantile(0.9, sum by (config_hash, le) (increase(kvhint_outcome_ttft_seconds_bucket` + sel + `[15s])))`,
		Window:       5*time.Minute + time.Second, // rounded up
	}
	if d := cmp.Diff(want, qs); d != "" {
		t.Fatalf("(-want +got)\n%s", d)
	}
	// A router name that is not a DNS label (what Kubernetes allows) is
	// refused: it could close the label matcher in an override.
	if _, err := p.Queries(Query{Namespace: "ns", Router: `a"}or vector(1)#`, Stable: stableHash, Candidate: candidateHash, Since: since}, since.Add(time.Minute)); err == nil ||
		!strings.Contains(err.Error(), "DNS labels") {
		t.Fatalf("a router name with a quote: %v", err)
	}
	if _, err := p.Queries(Query{Namespace: "ns", Router: "r", Stable: "x", Candidate: candidateHash, Since: since}, since.Add(time.Minute)); err == nil {
		t.Fatal("a bad hash: want an error")
	}
	if _, err := p.Queries(Query{Namespace: "ns", Router: "r", Stable: stableHash, Candidate: candidateHash, Since: since}, since); err == nil {
		t.Fatal("an empty window: want an error")
	}
}

func TestNewPrometheusRefuses(t *testing.T) {
	for addr, want := range map[string]string{
		"prometheus:9090":                "scheme must be http or https",
		"ftp://prometheus:9090":          "scheme must be http or https",
		"http://":                        "want scheme://host",
		"http://p:9090/?x=1":             "want scheme://host",
		"http://169.254.169.254/":        "link-local",
		"http://127.0.0.1:9090":          "loopback",
		"http://[::1]:9090":              "loopback",
		"http://0.0.0.0:9090":            "unspecified",
		"http://[ff02::1]:9090":          "multicast",
		"http://prometheus:9090\x7f/api": "invalid control character",
	} {
		if _, err := NewPrometheus(PrometheusOptions{Address: addr}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", addr, err, want)
		}
	}
	_, err := NewPrometheus(PrometheusOptions{Address: "http://p:9090", Queries: map[string]string{
		"hitRate": "x{{hash}}", OverridePrefixHit: "sum(x)", OverrideTTFTP90: "{{hash}}" + strings.Repeat("x", MaxOverrideBytes)}})
	for _, want := range []string{`query "hitRate": not one of prefixHit, ttftP90, errorRate`,
		"query prefixHit: no {{hash}}", "query ttftP90: 4104 bytes, over 4096"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("overrides: %v, want %q", err, want)
		}
	}
	if _, err := NewPrometheus(PrometheusOptions{Address: "http://p:9090", Step: time.Millisecond, RouterLabel: "a-b"}); err == nil ||
		!strings.Contains(err.Error(), "step 1ms is shorter than 1s") || !strings.Contains(err.Error(), `label "a-b" is not a label name`) {
		t.Errorf("bad step and label: %v", err)
	}
}

// apiServer answers the Prometheus HTTP API's query routes on loopback
// with bodies in the documented shape, keyed by the query's metric.
type apiServer struct {
	mu      sync.Mutex
	queries []string
	answer  func(path, query string) (int, string)
}

func (s *apiServer) start(t *testing.T) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err != nil || r.Method != http.MethodPost {
			http.Error(w, "bad form", http.StatusBadRequest)
			return
		}
		q := r.PostForm.Get("query")
		s.mu.Lock()
		s.queries = append(s.queries, r.URL.Path+" "+q)
		s.mu.Unlock()
		code, body := s.answer(r.URL.Path, q)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func vector(samples ...string) string {
	return `{"status":"success","data":{"resultType":"vector","result":[` + strings.Join(samples, ",") + `]}}`
}

func TestPrometheusParsesAnswers(t *testing.T) {
	a, c := `"config_hash":"`+stableHash+`"`, `"config_hash":"`+candidateHash+`"`
	s := &apiServer{answer: func(path, q string) (int, string) {
		switch {
		case path == "/api/v1/query_range" && strings.HasPrefix(q, "histogram_quantile"):
			return 200, `{"status":"success","data":{"resultType":"matrix","result":[` +
				`{"metric":{` + a + `},"values":[[1800000015,"0.1"],[1800000030,"NaN"],[1800000045,"0.12"]]},` +
				`{"metric":{` + c + `},"values":[[1800000015,"0.2"],[1800000030,"0.25"]]}]}}`
		case path == "/api/v1/query_range":
			return 200, `{"status":"success","data":{"resultType":"matrix","result":[` +
				`{"metric":{` + a + `},"values":[[1800000015,"0.6"],[1800000030,"0.5"]]},` +
				`{"metric":{` + c + `},"values":[[1800000015,"0.3"],[1800000030,"+Inf"]]}]}}`
		case strings.Contains(q, "requests_total"):
			return 200, vector(`{"metric":{`+a+`,"result":"ok"},"value":[1800000300,"290.4"]}`,
				`{"metric":{`+a+`,"result":"error"},"value":[1800000300,"9.6"]}`,
				`{"metric":{`+c+`,"result":"ok"},"value":[1800000300,"150"]}`,
				`{"metric":{`+c+`,"result":"hint_rejected"},"value":[1800000300,"30"]}`,
				`{"metric":{"config_hash":"00000000000000cc","result":"ok"},"value":[1800000300,"1000"]}`)
		case strings.Contains(q, "prompt_tokens"):
			return 200, vector(`{"metric":{`+a+`},"value":[1800000300,"30000"]}`, `{"metric":{`+c+`},"value":[1800000300,"18000"]}`)
		case strings.Contains(q, "cached_tokens"):
			return 200, vector(`{"metric":{`+a+`},"value":[1800000300,"18000"]}`, `{"metric":{`+c+`},"value":[1800000300,"5400"]}`)
		case strings.HasPrefix(q, "histogram_quantile(0.5"):
			return 200, vector(`{"metric":{`+a+`},"value":[1800000300,"0.08"]}`, `{"metric":{`+c+`},"value":[1800000300,"NaN"]}`)
		case strings.HasPrefix(q, "histogram_quantile(0.9"):
			return 200, vector(`{"metric":{`+a+`},"value":[1800000300,"0.11"]}`, `{"metric":{`+c+`},"value":[1800000300,"0.24"]}`)
		case strings.Contains(q, "shadow_bookings"):
			return 200, vector(`{"metric":{"role":"decode","result":"same"},"value":[1800000300,"90"]}`,
				`{"metric":{"role":"decode","result":"differ"},"value":[1800000300,"10"]}`,
				`{"metric":{"role":"decode","result":"candidate_error"},"value":[1800000300,"1"]}`)
		case strings.Contains(q, "shadow_action"):
			return 200, vector(`{"metric":{"action":"kv.fetch"},"value":[1800000300,"10"]}`)
		}
		return 400, `{"status":"error","errorType":"bad_data","error":"unexpected query"}`
	}}
	p, err := NewPrometheus(PrometheusOptions{Address: s.start(t), Step: 15 * time.Second, AllowLoopback: true})
	if err != nil {
		t.Fatal(err)
	}
	since := time.Unix(1_800_000_000, 0)
	m, err := p.Measure(context.Background(), Query{Namespace: "inference", Router: "llama", Stable: stableHash, Candidate: candidateHash,
		Since: since, Until: since.Add(5 * time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if m.Sources[0].Error != "" || len(m.Input.Unanswered) != 0 {
		t.Fatalf("sources %+v", m.Sources)
	}
	b, cn := m.Input.Baseline, m.Input.Canary
	if b.Requests != 300 || b.Errors != 10 || b.PromptTokens != 30000 || b.CachedTokens != 18000 || b.TTFTP50 != 0.08 || b.TTFTP90 != 0.11 {
		t.Errorf("baseline %+v", b)
	}
	if d := cmp.Diff([]float64{0.5, 0.6}, b.HitRatios); d != "" {
		t.Errorf("baseline hit ratios (-want +got)\n%s", d)
	}
	if d := cmp.Diff([]float64{0.1, 0.12}, b.TTFTs); d != "" {
		t.Errorf("baseline TTFTs, NaN left out (-want +got)\n%s", d)
	}
	if cn.Requests != 180 || cn.HintsRejected != 30 || cn.TTFTP50 != 0 || cn.TTFTP90 != 0.24 || len(cn.HitRatios) != 1 {
		t.Errorf("canary %+v", cn)
	}
	want := rolloutapi.ShadowCounts{Bookings: 101, Differ: 10, CandidateErrors: 1, ByAction: map[string]int64{"kv.fetch": 10}, ByRole: map[string]int64{"decode": 10}}
	if d := cmp.Diff(want, m.Shadow); d != "" {
		t.Errorf("shadow (-want +got)\n%s", d)
	}
	if len(s.queries) != 9 {
		t.Errorf("%d queries, want 9: %v", len(s.queries), s.queries)
	}
}

func TestPrometheusErrorsMakeTheServerUnanswered(t *testing.T) {
	cases := map[string]struct {
		code int
		body string
		want string
	}{
		"API error":    {400, `{"status":"error","errorType":"bad_data","error":"parse error at char 5"}`, "bad_data: parse error at char 5"},
		"not JSON":     {502, `<html>bad gateway</html>`, "answered 502 Bad Gateway, not the API's JSON"},
		"wrong type":   {200, `{"status":"success","data":{"resultType":"scalar","result":[]}}`, `result type "scalar", want "vector"`},
		"bad sample":   {200, vector(`{"metric":{},"value":[1,2]}`), "the value is not a string"},
		"too large":    {200, vector(strings.Repeat(`{"metric":{},"value":[1,"1"]},`, 100) + `{"metric":{},"value":[1,"1"]}`), "exceeds 1024 bytes"},
		"not a number": {200, vector(`{"metric":{},"value":[1,"x"]}`), "invalid syntax"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			s := &apiServer{answer: func(string, string) (int, string) { return c.code, c.body }}
			p, err := NewPrometheus(PrometheusOptions{Address: s.start(t), AllowLoopback: true, MaxBodyBytes: 1024})
			if err != nil {
				t.Fatal(err)
			}
			since := time.Unix(1_800_000_000, 0)
			m, err := p.Measure(context.Background(), Query{Namespace: "n", Router: "r", Stable: stableHash, Candidate: candidateHash, Since: since, Until: since.Add(time.Minute)})
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(m.Sources[0].Error, c.want) || len(m.Input.Unanswered) != 1 {
				t.Fatalf("source %+v unanswered %v, want an error with %q", m.Sources[0], m.Input.Unanswered, c.want)
			}
		})
	}
}

func TestPrometheusOverrides(t *testing.T) {
	// Each override runs per config hash, over the window and per step,
	// with the placeholders filled in.
	s := &apiServer{answer: func(path, q string) (int, string) {
		hashLabel := ""
		for _, h := range []string{stableHash, candidateHash} {
			if strings.Contains(q, h) && !strings.Contains(q, "|") {
				hashLabel = h
			}
		}
		val := map[string]string{stableHash: "0.6", candidateHash: "0.4"}[hashLabel]
		if strings.HasPrefix(q, "my_errors") {
			val = map[string]string{stableHash: "0.01", candidateHash: "0.1"}[hashLabel]
		}
		switch {
		case hashLabel == "" && strings.Contains(q, "requests_total"):
			return 200, vector(`{"metric":{"config_hash":"`+stableHash+`","result":"ok"},"value":[1,"1000"]}`,
				`{"metric":{"config_hash":"`+candidateHash+`","result":"ok"},"value":[1,"500"]}`)
		case hashLabel == "" && path == "/api/v1/query_range":
			return 200, `{"status":"success","data":{"resultType":"matrix","result":[]}}`
		case hashLabel == "":
			return 200, vector()
		case path == "/api/v1/query_range":
			return 200, `{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":[[1,"` + val + `"],[2,"` + val + `"]]}]}}`
		}
		return 200, vector(`{"metric":{},"value":[1,"` + val + `"]}`)
	}}
	p, err := NewPrometheus(PrometheusOptions{Address: s.start(t), Step: 15 * time.Second, AllowLoopback: true, Queries: map[string]string{
		OverridePrefixHit: `my_hits{ns="{{namespace}}",router="{{router}}",hash="{{hash}}"}[{{window}}]`,
		OverrideErrorRate: `my_errors{hash="{{hash}}"}[{{window}}]`,
	}})
	if err != nil {
		t.Fatal(err)
	}
	since := time.Unix(1_800_000_000, 0)
	m, err := p.Measure(context.Background(), Query{Namespace: "inference", Router: "llama", Stable: stableHash, Candidate: candidateHash,
		Since: since, Until: since.Add(time.Minute)})
	if err != nil || m.Sources[0].Error != "" {
		t.Fatalf("%v %+v", err, m.Sources)
	}
	b, c := m.Input.Baseline, m.Input.Canary
	if b.PrefixHitRatio() != 0.6 || c.PrefixHitRatio() != 0.4 || len(b.HitRatios) != 2 || c.HitRatios[0] != 0.4 {
		t.Errorf("prefix hit: baseline %v %v canary %v %v", b.PrefixHitRatio(), b.HitRatios, c.PrefixHitRatio(), c.HitRatios)
	}
	if b.Errors != 10 || c.Errors != 50 || b.Requests != 1000 || c.Requests != 500 {
		t.Errorf("errors %d of %d, %d of %d", b.Errors, b.Requests, c.Errors, c.Requests)
	}
	var rendered []string
	for _, q := range s.queries {
		if strings.Contains(q, "my_hits") {
			rendered = append(rendered, q)
		}
	}
	want := []string{
		`/api/v1/query my_hits{ns="inference",router="llama",hash="00000000000000aa"}[60s]`,
		`/api/v1/query_range my_hits{ns="inference",router="llama",hash="00000000000000aa"}[15s]`,
		`/api/v1/query my_hits{ns="inference",router="llama",hash="00000000000000bb"}[60s]`,
		`/api/v1/query_range my_hits{ns="inference",router="llama",hash="00000000000000bb"}[15s]`,
	}
	if d := cmp.Diff(want, rendered); d != "" {
		t.Errorf("rendered overrides (-want +got)\n%s", d)
	}
}
