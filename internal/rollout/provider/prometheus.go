package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kvrouter/kv-hint-operator/internal/rollout/analysis"
)

// PrometheusOptions configure the Prometheus provider.
type PrometheusOptions struct {
	// Address is the Prometheus server's base URL, http or https, with
	// an optional path prefix (http://prometheus.monitoring:9090).
	Address string
	// Step is the resolution of the observations the rank tests compare:
	// one prefix-hit ratio and one TTFT p90 per step and config. Default
	// 30s; at least 1s. Choose at least twice the scrape interval.
	Step time.Duration
	// NamespaceLabel and RouterLabel are the series' labels that hold a
	// router pod's namespace and router; default "namespace" and
	// "router", as the PodMonitor in config/prometheus sets them.
	NamespaceLabel, RouterLabel string
	// Timeout bounds each query. Default 10s.
	Timeout time.Duration
	// MaxBodyBytes bounds each answer. Default 8 MiB.
	MaxBodyBytes int64
	// AllowLoopback lets the server resolve to a loopback address (a
	// local development setup). Unspecified, multicast and link-local
	// addresses are always refused.
	AllowLoopback bool
	// Queries override the PromQL of a metric, by name: OverridePrefixHit,
	// OverrideTTFTP90, OverrideErrorRate. Each is run per config hash and
	// must give one series: its value over the window (the figure) and
	// per Step (the observations). A query takes the placeholders
	// {{hash}} (required), {{namespace}}, {{router}} (DNS labels, so they
	// cannot break out of a quoted label value) and {{window}} (as 90s).
	// The request counts, and so the minimum sample size, still come from
	// kvhint_outcome_requests_total; an error-rate override's rate is
	// applied to them.
	Queries map[string]string
}

// Names of the metrics whose query can be overridden.
const (
	OverridePrefixHit = "prefixHit"
	OverrideTTFTP90   = "ttftP90"
	OverrideErrorRate = "errorRate"
)

// MaxOverrideBytes bounds an overriding query.
const MaxOverrideBytes = 4096

// Prometheus is the provider that reads the kvhint_outcome_* series the
// sidecars export from a Prometheus server: counts over the window for
// the rates and the minimum sample size, and one observation per Step for
// the rank tests, the way Kayenta compares a canary's time series with
// the baseline's. Its limit: a rank test over n steps per arm cannot
// reach a p-value below 1/C(2n, n) (n = 4: 0.014, above the default
// level of 0.05/4), so a window needs at least 5 steps for a metric to
// fail; the analysis calls fewer Inconclusive. Counts come from
// increase(), which extrapolates to the window's edges: near the true
// count, rarely equal. The prompt-token series count failed requests too,
// which the sidecar provider leaves out of the prefix-hit ratio.
type Prometheus struct {
	opts   PrometheusOptions
	base   *url.URL
	client *http.Client
}

var (
	labelName = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)
	dnsLabel  = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)
)

// NewPrometheus checks the options and returns the provider.
func NewPrometheus(o PrometheusOptions) (*Prometheus, error) {
	if o.Step == 0 {
		o.Step = 30 * time.Second
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = 8 << 20
	}
	if o.NamespaceLabel == "" {
		o.NamespaceLabel = "namespace"
	}
	if o.RouterLabel == "" {
		o.RouterLabel = "router"
	}
	var errs []error
	u, err := url.Parse(o.Address)
	switch {
	case err != nil:
		errs = append(errs, fmt.Errorf("prometheus address %q: %w", o.Address, err))
	case u.Scheme != "http" && u.Scheme != "https":
		errs = append(errs, fmt.Errorf("prometheus address %q: scheme must be http or https", o.Address))
	case u.Host == "" || u.Opaque != "" || u.RawQuery != "" || u.Fragment != "":
		errs = append(errs, fmt.Errorf("prometheus address %q: want scheme://host[:port][/prefix]", o.Address))
	default:
		if ip, err := netip.ParseAddr(strings.Trim(u.Hostname(), "[]")); err == nil {
			if err := checkIP(ip, o.AllowLoopback); err != nil {
				errs = append(errs, fmt.Errorf("prometheus address %q: %w", o.Address, err))
			}
		}
	}
	if o.Step < time.Second {
		errs = append(errs, fmt.Errorf("prometheus step %v is shorter than 1s", o.Step))
	}
	for name, tmpl := range o.Queries {
		switch {
		case name != OverridePrefixHit && name != OverrideTTFTP90 && name != OverrideErrorRate:
			errs = append(errs, fmt.Errorf("prometheus query %q: not one of %s, %s, %s", name, OverridePrefixHit, OverrideTTFTP90, OverrideErrorRate))
		case !strings.Contains(tmpl, "{{hash}}"):
			errs = append(errs, fmt.Errorf("prometheus query %s: no {{hash}}, so both configs would get the same figures", name))
		case len(tmpl) > MaxOverrideBytes:
			errs = append(errs, fmt.Errorf("prometheus query %s: %d bytes, over %d", name, len(tmpl), MaxOverrideBytes))
		}
	}
	for _, l := range []string{o.NamespaceLabel, o.RouterLabel} {
		if !labelName.MatchString(l) {
			errs = append(errs, fmt.Errorf("prometheus label %q is not a label name", l))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	// A host name resolves at dial time: the socket check refuses what
	// it resolves to as Target refuses pod IPs.
	dialer := &net.Dialer{Timeout: o.Timeout, Control: dialControl(o.AllowLoopback)}
	client := &http.Client{
		Transport: &http.Transport{Proxy: nil, DialContext: dialer.DialContext, ResponseHeaderTimeout: o.Timeout,
			MaxIdleConnsPerHost: 2, IdleConnTimeout: time.Minute},
		Timeout:       o.Timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	return &Prometheus{opts: o, base: u, client: client}, nil
}

// Queries are the PromQL a measurement runs.
type Queries struct {
	// At the window's end, over the window: requests by config and
	// result, prompt and cached tokens by config, the TTFT p50 and p90
	// by config, the shadow bookings by role and result and the differing
	// actions by action.
	Requests, PromptTokens, CachedTokens, TTFTP50, TTFTP90, ShadowBookings, ShadowActions string
	// Over the window at Step: the prefix-hit ratio and the TTFT p90 per
	// step, by config.
	HitRatioSteps, TTFTP90Steps string
	// Window is the range of the instant queries.
	Window time.Duration
}

// Queries builds the PromQL for q over [since, until].
func (p *Prometheus) Queries(q Query, until time.Time) (Queries, error) {
	if err := q.check(); err != nil {
		return Queries{}, err
	}
	if !dnsLabel.MatchString(q.Namespace) || !dnsLabel.MatchString(q.Router) {
		return Queries{}, fmt.Errorf("router %q in namespace %q: a Prometheus query needs names that are DNS labels", q.Router, q.Namespace)
	}
	// Whole seconds, rounded up so the range reaches back to the step's
	// start: increase() counts from the last sample before it.
	window := (until.Sub(q.Since) + time.Second - 1).Truncate(time.Second)
	if window < time.Second {
		return Queries{}, fmt.Errorf("router %s/%s: window %v from %s to %s is shorter than 1s", q.Namespace, q.Router, window,
			q.Since.UTC().Format(time.RFC3339), until.UTC().Format(time.RFC3339))
	}
	router := fmt.Sprintf("%s=%s,%s=%s", p.opts.NamespaceLabel, strconv.Quote(q.Namespace), p.opts.RouterLabel, strconv.Quote(q.Router))
	sel := fmt.Sprintf("{%s,config_hash=~%s}", router, strconv.Quote(q.Stable+"|"+q.Candidate))
	w, step := promDuration(window), promDuration(p.opts.Step)
	inc := func(metric, by, rng string) string {
		return fmt.Sprintf("sum by (%s) (increase(%s%s[%s]))", by, metric, sel, rng)
	}
	quantile := func(phi, rng string) string {
		return fmt.Sprintf("histogram_quantile(%s, %s)", phi, inc("kvhint_outcome_ttft_seconds_bucket", "config_hash, le", rng))
	}
	return Queries{
		Requests:       inc("kvhint_outcome_requests_total", "config_hash, result", w),
		PromptTokens:   inc("kvhint_outcome_prompt_tokens_total", "config_hash", w),
		CachedTokens:   inc("kvhint_outcome_cached_tokens_total", "config_hash", w),
		TTFTP50:        quantile("0.5", w),
		TTFTP90:        quantile("0.9", w),
		ShadowBookings: fmt.Sprintf("sum by (role, result) (increase(kvhint_shadow_bookings_total{%s}[%s]))", router, w),
		ShadowActions:  fmt.Sprintf("sum by (action) (increase(kvhint_shadow_action_diff_total{%s}[%s]))", router, w),
		HitRatioSteps: inc("kvhint_outcome_cached_tokens_total", "config_hash", step) + " / " +
			inc("kvhint_outcome_prompt_tokens_total", "config_hash", step),
		TTFTP90Steps: quantile("0.9", step),
		Window:       window,
	}, nil
}

// promDuration is d in whole seconds, as PromQL writes a range.
func promDuration(d time.Duration) string { return strconv.FormatInt(int64(d/time.Second), 10) + "s" }

// Measure runs the queries over [q.Since, q.Until] (Until zero: now). A
// server that fails any query is named in Input.Unanswered.
func (p *Prometheus) Measure(ctx context.Context, q Query) (Measurement, error) {
	until := q.Until
	if until.IsZero() {
		until = time.Now()
	}
	qs, err := p.Queries(q, until)
	if err != nil {
		return Measurement{}, err
	}
	src := Source{Name: "prometheus", Address: p.base.String()}
	m, err := p.measure(ctx, q, qs, until)
	if err != nil {
		src.Error = err.Error()
		m = Measurement{Input: analysis.Input{Unanswered: []string{"prometheus"}}}
	}
	m.Sources = []Source{src}
	return m, nil
}

func (p *Prometheus) measure(ctx context.Context, q Query, qs Queries, until time.Time) (Measurement, error) {
	arms := map[string]*analysis.Arm{q.Stable: {}, q.Candidate: {}}
	var m Measurement

	requests, err := p.instant(ctx, qs.Requests, until)
	if err != nil {
		return m, err
	}
	for _, s := range requests {
		a := arms[s.Metric["config_hash"]]
		if a == nil {
			continue
		}
		n := count(s.Value)
		a.Requests += n
		switch s.Metric["result"] {
		case "error":
			a.Errors += n
		case "hint_rejected":
			a.HintsRejected += n
		}
	}
	perConfig := []struct {
		query string
		set   func(*analysis.Arm, float64)
	}{
		{qs.PromptTokens, func(a *analysis.Arm, v float64) { a.PromptTokens = count(v) }},
		{qs.CachedTokens, func(a *analysis.Arm, v float64) { a.CachedTokens = count(v) }},
		{qs.TTFTP50, func(a *analysis.Arm, v float64) { a.TTFTP50 = finite(v) }},
		{qs.TTFTP90, func(a *analysis.Arm, v float64) { a.TTFTP90 = finite(v) }},
	}
	for _, pc := range perConfig {
		series, err := p.instant(ctx, pc.query, until)
		if err != nil {
			return m, err
		}
		for _, s := range series {
			if a := arms[s.Metric["config_hash"]]; a != nil {
				pc.set(a, s.Value)
			}
		}
	}
	steps := []struct {
		query string
		obs   func(*analysis.Arm) *[]float64
	}{
		{qs.HitRatioSteps, func(a *analysis.Arm) *[]float64 { return &a.HitRatios }},
		{qs.TTFTP90Steps, func(a *analysis.Arm) *[]float64 { return &a.TTFTs }},
	}
	start := q.Since.Add(p.opts.Step)
	for _, st := range steps {
		if start.After(until) {
			break // a window shorter than a step has no observations
		}
		series, err := p.rangeQuery(ctx, st.query, start, until)
		if err != nil {
			return m, err
		}
		for _, s := range series {
			a := arms[s.Metric["config_hash"]]
			if a == nil {
				continue
			}
			obs := st.obs(a)
			for _, v := range s.Values {
				if !math.IsNaN(v) && !math.IsInf(v, 0) {
					*obs = append(*obs, v)
				}
			}
			slices.Sort(*obs)
		}
	}
	if err := p.overrides(ctx, q, qs, arms, start, until); err != nil {
		return m, err
	}
	m.Input.Baseline, m.Input.Canary = *arms[q.Stable], *arms[q.Candidate]

	bookings, err := p.instant(ctx, qs.ShadowBookings, until)
	if err != nil {
		return m, err
	}
	for _, s := range bookings {
		n := count(s.Value)
		m.Shadow.Bookings += n
		switch s.Metric["result"] {
		case "differ":
			m.Shadow.Differ += n
			if role := s.Metric["role"]; role != "" && n > 0 {
				if m.Shadow.ByRole == nil {
					m.Shadow.ByRole = map[string]int64{}
				}
				m.Shadow.ByRole[role] += n
			}
		case "candidate_error":
			m.Shadow.CandidateErrors += n
		}
	}
	actions, err := p.instant(ctx, qs.ShadowActions, until)
	if err != nil {
		return m, err
	}
	for _, s := range actions {
		if n := count(s.Value); n > 0 && s.Metric["action"] != "" {
			if m.Shadow.ByAction == nil {
				m.Shadow.ByAction = map[string]int64{}
			}
			m.Shadow.ByAction[s.Metric["action"]] += n
		}
	}
	return m, nil
}

// overrides runs the overriding queries, per config hash, and puts their
// figures and observations in place of the defaults'.
func (p *Prometheus) overrides(ctx context.Context, q Query, qs Queries, arms map[string]*analysis.Arm, start, until time.Time) error {
	for _, name := range []string{OverridePrefixHit, OverrideTTFTP90, OverrideErrorRate} {
		tmpl, ok := p.opts.Queries[name]
		if !ok {
			continue
		}
		for _, hash := range []string{q.Stable, q.Candidate} {
			a := arms[hash]
			render := func(window time.Duration) string {
				return strings.NewReplacer("{{hash}}", hash, "{{namespace}}", q.Namespace, "{{router}}", q.Router,
					"{{window}}", promDuration(window)).Replace(tmpl)
			}
			series, err := p.instant(ctx, render(qs.Window), until)
			if err != nil {
				return fmt.Errorf("query %s: %w", name, err)
			}
			if len(series) > 1 {
				return fmt.Errorf("query %s for config %s gave %d series, want one", name, hash, len(series))
			}
			var figure float64
			if len(series) == 1 {
				figure = finite(series[0].Value)
			}
			var obs []float64
			if !start.After(until) && name != OverrideErrorRate {
				steps, err := p.rangeQuery(ctx, render(p.opts.Step), start, until)
				if err != nil {
					return fmt.Errorf("query %s: %w", name, err)
				}
				if len(steps) > 1 {
					return fmt.Errorf("query %s per step for config %s gave %d series, want one", name, hash, len(steps))
				}
				for _, st := range steps {
					for _, v := range st.Values {
						if !math.IsNaN(v) && !math.IsInf(v, 0) {
							obs = append(obs, v)
						}
					}
				}
				slices.Sort(obs)
			}
			switch name {
			case OverridePrefixHit:
				if len(series) == 1 {
					a.HitRatio = &figure
				}
				a.HitRatios = obs
			case OverrideTTFTP90:
				a.TTFTP90, a.TTFTs = figure, obs
			case OverrideErrorRate:
				// The test of rates wants counts: the rate of the
				// requests counted.
				a.Errors = count(min(max(figure, 0), 1) * float64(a.Requests))
			}
		}
	}
	return nil
}

// count rounds an increase (Prometheus extrapolates it to the window's
// edges, so it is rarely whole) to a count; NaN and negatives are 0.
func count(v float64) int64 {
	if math.IsNaN(v) || v <= 0 || math.IsInf(v, 0) {
		return 0
	}
	return int64(math.Round(v))
}

func finite(v float64) float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0
	}
	return v
}

// series is one series of a Prometheus answer: a vector's sample
// (Value) or a matrix's samples (Values).
type series struct {
	Metric map[string]string
	Value  float64
	Values []float64
}

// apiAnswer is the envelope of the Prometheus HTTP API's answers
// (https://prometheus.io/docs/prometheus/latest/querying/api/).
type apiAnswer struct {
	Status    string `json:"status"`
	ErrorType string `json:"errorType"`
	Error     string `json:"error"`
	Data      struct {
		ResultType string `json:"resultType"`
		Result     []struct {
			Metric map[string]string `json:"metric"`
			Value  json.RawMessage   `json:"value"`
			Values []json.RawMessage `json:"values"`
		} `json:"result"`
	} `json:"data"`
}

func (p *Prometheus) instant(ctx context.Context, query string, at time.Time) ([]series, error) {
	v := url.Values{"query": {query}, "time": {promTime(at)}}
	return p.call(ctx, "/api/v1/query", v, "vector")
}

func (p *Prometheus) rangeQuery(ctx context.Context, query string, start, end time.Time) ([]series, error) {
	v := url.Values{"query": {query}, "start": {promTime(start)}, "end": {promTime(end)},
		"step": {strconv.FormatFloat(p.opts.Step.Seconds(), 'f', -1, 64)}}
	return p.call(ctx, "/api/v1/query_range", v, "matrix")
}

func promTime(t time.Time) string {
	return strconv.FormatFloat(float64(t.UnixMilli())/1000, 'f', 3, 64)
}

// call POSTs a query (the form keeps long PromQL out of URLs and logs)
// and decodes the answer, which must be of resultType want.
func (p *Prometheus) call(ctx context.Context, path string, form url.Values, want string) ([]series, error) {
	ctx, cancel := context.WithTimeout(ctx, p.opts.Timeout)
	defer cancel()
	endpoint := p.base.JoinPath(path).String()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, strings.NewReader(form.Encode()))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	resp, err := p.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, p.opts.MaxBodyBytes+1))
	if err != nil {
		return nil, fmt.Errorf("POST %s: reading the answer: %w", endpoint, err)
	}
	if int64(len(body)) > p.opts.MaxBodyBytes {
		return nil, fmt.Errorf("POST %s: the answer exceeds %d bytes", endpoint, p.opts.MaxBodyBytes)
	}
	var a apiAnswer
	if err := json.Unmarshal(body, &a); err != nil {
		return nil, fmt.Errorf("POST %s: answered %s, not the API's JSON: %.200s", endpoint, resp.Status, body)
	}
	if a.Status != "success" {
		return nil, fmt.Errorf("POST %s: answered %s, %s: %s (query %s)", endpoint, resp.Status, a.ErrorType, a.Error, form.Get("query"))
	}
	if a.Data.ResultType != want {
		return nil, fmt.Errorf("POST %s: result type %q, want %q (query %s)", endpoint, a.Data.ResultType, want, form.Get("query"))
	}
	out := make([]series, 0, len(a.Data.Result))
	for i, r := range a.Data.Result {
		s := series{Metric: r.Metric}
		if want == "vector" {
			v, err := sampleValue(r.Value)
			if err != nil {
				return nil, fmt.Errorf("POST %s: result %d: %w", endpoint, i, err)
			}
			s.Value = v
		} else {
			s.Values = make([]float64, 0, len(r.Values))
			for j, raw := range r.Values {
				v, err := sampleValue(raw)
				if err != nil {
					return nil, fmt.Errorf("POST %s: result %d value %d: %w", endpoint, i, j, err)
				}
				s.Values = append(s.Values, v)
			}
		}
		out = append(out, s)
	}
	return out, nil
}

// sampleValue decodes a [<unix time>, "<value>"] pair's value.
func sampleValue(raw json.RawMessage) (float64, error) {
	var pair []any
	if err := json.Unmarshal(raw, &pair); err != nil || len(pair) != 2 {
		return 0, fmt.Errorf("sample %.80s is not [time, \"value\"]", raw)
	}
	s, ok := pair[1].(string)
	if !ok {
		return 0, fmt.Errorf("sample %.80s: the value is not a string", raw)
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, fmt.Errorf("sample %.80s: %w", raw, err)
	}
	return v, nil
}
