package observability_test

import (
	"fmt"
	"io"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/kvrouter/kv-hint-operator/internal/dev/registries"
)

// The metric names the product exports, from its real registries: a
// sidecar started on loopback (scraped over HTTP, and its registry's
// descriptors for the series that exist only once a policy blocks or a
// worker registers), and the manager's (controller-runtime's registry,
// with what `kvhint manager` registers in it). Prometheus adds up.
var (
	knownOnce sync.Once
	known     map[string]string // name -> where it comes from
	knownErr  error
)

// scrapeSynthetic are the series Prometheus itself writes for a target.
var scrapeSynthetic = []string{"up"}

func knownMetrics(t *testing.T) map[string]string {
	t.Helper()
	knownOnce.Do(func() { known, knownErr = gatherKnown() })
	if knownErr != nil {
		t.Fatalf("gathering the product's metric names: %v", knownErr)
	}
	return known
}

func gatherKnown() (map[string]string, error) {
	names := map[string]string{}
	for _, n := range scrapeSynthetic {
		names[n] = "prometheus"
	}
	side, err := sidecarNames()
	if err != nil {
		return nil, fmt.Errorf("sidecar: %w", err)
	}
	for n := range side {
		names[n] = "sidecar"
	}
	mgr, err := managerNames()
	if err != nil {
		return nil, fmt.Errorf("manager: %w", err)
	}
	for n := range mgr {
		if _, ok := names[n]; !ok {
			names[n] = "manager"
		}
	}
	return names, nil
}

// sidecarNames starts a real sidecar on loopback with a small hints
// config, scrapes its /metrics, and adds its registry's descriptors.
func sidecarNames() (map[string]bool, error) {
	s, stop, err := registries.Sidecar()
	if err != nil {
		return nil, err
	}
	defer stop()
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + s.OpsAddr() + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	names, err := exposedNames(body)
	if err != nil {
		return nil, err
	}
	addDescribed(names, s.Metrics)
	return names, nil
}

// managerNames builds the manager's registry as `kvhint manager` does:
// controller-runtime's, which its packages fill when they load, and the
// manager's own collector registered with controllers.RegisterMetrics on a
// manager (built, not started: it needs no API server for that).
func managerNames() (map[string]bool, error) {
	g, d, err := registries.Manager()
	if err != nil {
		return nil, err
	}
	families, err := g.Gather()
	if err != nil {
		return nil, err
	}
	names := map[string]bool{}
	for _, f := range families {
		addFamily(names, f)
	}
	addDescribed(names, d)
	return names, nil
}

// exposedNames parses a /metrics answer.
func exposedNames(body []byte) (map[string]bool, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		return nil, err
	}
	names := map[string]bool{}
	for _, f := range families {
		addFamily(names, f)
	}
	return names, nil
}

// addFamily adds a family's name, and a histogram's or summary's series
// names.
func addFamily(names map[string]bool, f *dto.MetricFamily) {
	n := f.GetName()
	names[n] = true
	switch f.GetType() {
	case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
		names[n+"_bucket"], names[n+"_sum"], names[n+"_count"] = true, true, true
	case dto.MetricType_SUMMARY:
		names[n+"_sum"], names[n+"_count"] = true, true
	}
}

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

// addDescribed adds the names of the metrics c describes: those of a
// vector with no series yet are not gathered. A descriptor does not say
// its type; one named *_seconds that was not gathered is taken for a
// histogram (every such metric of the product's is one).
func addDescribed(names map[string]bool, c interface{ Describe(chan<- *prometheus.Desc) }) {
	ch := make(chan *prometheus.Desc)
	go func() { c.Describe(ch); close(ch) }()
	for d := range ch {
		m := fqName.FindStringSubmatch(d.String())
		if m == nil || names[m[1]] {
			continue
		}
		names[m[1]] = true
		if strings.HasSuffix(m[1], "_seconds") {
			names[m[1]+"_bucket"], names[m[1]+"_sum"], names[m[1]+"_count"] = true, true, true
		}
	}
}

// TestKnownMetricsAreTheProducts: the names gathered are those of the
// product, so the checks against them mean something: the families every
// alert reads from the sidecar and the manager are there, with their
// origin.
func TestKnownMetricsAreTheProducts(t *testing.T) {
	k := knownMetrics(t)
	for name, from := range map[string]string{
		"kvhint_router_bookings_total":                     "sidecar",
		"kvhint_router_policy_ejected":                     "sidecar",
		"kvhint_router_hint_build_duration_seconds_bucket": "sidecar",
		"kvhint_router_config_last_reload_successful":      "sidecar",
		"kvhint_router_open_connections":                   "sidecar",
		"kvhint_manager_routerrole_condition":              "manager",
		"kvhint_manager_router_pods":                       "manager",
		"controller_runtime_reconcile_errors_total":        "manager",
		"controller_runtime_reconcile_total":               "manager",
	} {
		if got, ok := k[name]; !ok || got != from {
			t.Errorf("%s: from %q (present %v); want from %s", name, got, ok, from)
		}
	}
	if n := len(k); n < 40 {
		var all []string
		for name := range k {
			all = append(all, name)
		}
		sort.Strings(all)
		t.Errorf("only %d metric names gathered: %v", n, all)
	}
}
