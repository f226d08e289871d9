package observability_test

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/prometheus/model/rulefmt"
	"go.yaml.in/yaml/v3"

	"github.com/kvrouter/kv-hint-operator/tools/observability"
)

// root is the repository's root, from this module's folder.
const root = "../.."

func readRoot(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, path))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// alerts parses the rules file as Prometheus does, and returns its
// alerting rules.
func alerts(t *testing.T) []rulefmt.Rule {
	t.Helper()
	groups, err := observability.ParseRules(readRoot(t, observability.RulesPath))
	if err != nil {
		t.Fatalf("%s: %v", observability.RulesPath, err)
	}
	var out []rulefmt.Rule
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				out = append(out, r)
			}
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s holds no alerts", observability.RulesPath)
	}
	return out
}

// TestRulesParse: the rules file and the PrometheusRule's spec both
// parse and validate with Prometheus's own rule loader (model/rulefmt),
// which is what the Prometheus Operator checks a PrometheusRule with.
func TestRulesParse(t *testing.T) {
	alerts(t)
	var pr struct {
		Spec yaml.Node `yaml:"spec"`
	}
	if err := yaml.Unmarshal(readRoot(t, observability.PrometheusRulePath), &pr); err != nil {
		t.Fatalf("%s: %v", observability.PrometheusRulePath, err)
	}
	spec, err := yaml.Marshal(&pr.Spec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := observability.ParseRules(spec); err != nil {
		t.Errorf("%s: spec: %v", observability.PrometheusRulePath, err)
	}
}

// TestRulesParseRefusesBrokenRules: the parse check fails on what
// Prometheus would refuse to load.
func TestRulesParseRefusesBrokenRules(t *testing.T) {
	for name, content := range map[string]string{
		"bad PromQL":    "groups:\n- name: g\n  rules:\n  - alert: A\n    expr: rate(x[5m]\n",
		"unknown field": "groups:\n- name: g\n  rules:\n  - alert: A\n    expr: up == 0\n    severity: page\n",
		"bad template":  "groups:\n- name: g\n  rules:\n  - alert: A\n    expr: up == 0\n    annotations:\n      summary: '{{ $labels.pod '\n",
	} {
		if _, err := observability.ParseRules([]byte(content)); err == nil {
			t.Errorf("%s: parsed without error", name)
		}
	}
}

// TestGeneratedFilesUpToDate: the committed generated files are what the
// generator writes from their sources now.
func TestGeneratedFilesUpToDate(t *testing.T) {
	files, err := observability.Generated(root)
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range files {
		if diff := cmp.Diff(string(want), string(readRoot(t, path))); diff != "" {
			t.Errorf("%s is stale: run make observability-gen (-generated +committed):\n%s", path, diff)
		}
	}
}

var severities = []string{"critical", "warning", "info"}

// ratioWindow is the for: of an alert on a ratio of rates.
const minRatioFor, maxRatioFor = 10 * time.Minute, 15 * time.Minute

// TestAlertConventions: every alert follows the conventions of the
// monitoring mixins: a KVHint name, a severity, a summary and a
// description, a runbook_url to its own section of docs/runbooks.md, and
// 10 to 15 minutes of for: on a ratio.
func TestAlertConventions(t *testing.T) {
	runbooks := string(readRoot(t, observability.RunbooksPath))
	seen := map[string]bool{}
	for _, a := range alerts(t) {
		if !strings.HasPrefix(a.Alert, "KVHint") {
			t.Errorf("%s: alert names start with KVHint", a.Alert)
		}
		if seen[a.Alert] {
			t.Errorf("%s: two alerts of that name", a.Alert)
		}
		seen[a.Alert] = true
		if !slices.Contains(severities, a.Labels["severity"]) {
			t.Errorf("%s: severity %q; want one of %v", a.Alert, a.Labels["severity"], severities)
		}
		for _, key := range []string{"summary", "description"} {
			if strings.TrimSpace(a.Annotations[key]) == "" {
				t.Errorf("%s: no %s", a.Alert, key)
			}
		}
		if got, want := a.Annotations["runbook_url"], observability.RunbookURL(a.Alert); got != want {
			t.Errorf("%s: runbook_url %q; want %q", a.Alert, got, want)
		}
		if !regexp.MustCompile(`(?m)^## ` + a.Alert + `$`).MatchString(runbooks) {
			t.Errorf("%s: %s has no section \"## %s\" for its runbook_url", a.Alert, observability.RunbooksPath, a.Alert)
		}
		if strings.Contains(a.Expr, "rate(") && strings.Contains(a.Expr, "/") {
			if f := time.Duration(a.For); f < minRatioFor || f > maxRatioFor {
				t.Errorf("%s: a ratio alert with for: %s; want %s to %s", a.Alert, a.For, minRatioFor, maxRatioFor)
			}
		}
	}
}

// TestRuleMetricsExist: every metric an alert's expression reads is one
// the sidecar or the manager exports (or up), so that renaming a metric
// fails here and not silently in production.
func TestRuleMetricsExist(t *testing.T) {
	k := knownMetrics(t)
	for _, a := range alerts(t) {
		names, err := observability.MetricNames(a.Expr)
		if err != nil {
			t.Errorf("%s: %v", a.Alert, err)
			continue
		}
		for _, n := range names {
			if _, ok := k[n]; !ok {
				t.Errorf("%s reads %s, which neither the sidecar nor the manager exports", a.Alert, n)
			}
		}
	}
}

// promtoolTests is the part of a promtool test file this check reads.
type promtoolTests struct {
	Tests []struct {
		AlertRuleTest []struct {
			Alertname string           `yaml:"alertname"`
			ExpAlerts []map[string]any `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
	} `yaml:"tests"`
}

// TestPromtoolCoversEveryAlert: every alert has a case where it fires
// and one where it does not.
func TestPromtoolCoversEveryAlert(t *testing.T) {
	tests, _ := filepath.Glob(filepath.Join("tests", "*.yaml"))
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, path := range tests {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var pt promtoolTests
		dec := yaml.NewDecoder(bytes.NewReader(b))
		if err := dec.Decode(&pt); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		for _, tc := range pt.Tests {
			for _, at := range tc.AlertRuleTest {
				if len(at.ExpAlerts) > 0 {
					fires[at.Alertname] = true
				} else {
					quiet[at.Alertname] = true
				}
			}
		}
	}
	for _, a := range alerts(t) {
		if !fires[a.Alert] {
			t.Errorf("%s: no promtool case in which it fires", a.Alert)
		}
		if !quiet[a.Alert] {
			t.Errorf("%s: no promtool case in which it does not fire", a.Alert)
		}
	}
}
