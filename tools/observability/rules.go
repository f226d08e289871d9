package observability

import (
	"errors"
	"fmt"
	"log/slog"
	"sort"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// Paths of the monitoring files, relative to the repository's root.
const (
	// RulesPath is the alert rules, hand-written: the source of the
	// PrometheusRule.
	RulesPath = "config/prometheus/rules/kvhint.rules.yaml"
	// PrometheusRulePath is the PrometheusRule generated from RulesPath.
	PrometheusRulePath = "config/prometheus/prometheusrule.yaml"
	// RunbooksPath is the runbooks every alert's runbook_url points into.
	RunbooksPath = "docs/runbooks.md"
)

// RunbookURL is the runbook_url of an alert: its section of
// docs/runbooks.md, whose heading is the alert's name.
func RunbookURL(alert string) string {
	return "https://github.com/kvrouter/kv-hint-operator/blob/main/docs/runbooks.md#" + Anchor(alert)
}

// Anchor is the anchor GitHub gives a Markdown heading made of an alert's
// name: the name in lower case.
func Anchor(alert string) string {
	b := []byte(alert)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// promQL is the parser the rules are checked with: Prometheus's defaults,
// as a Prometheus server without feature flags parses them.
var promQL = parser.NewParser(parser.Options{})

// ParseRules parses and validates a Prometheus rules file as Prometheus
// does when it loads one (model/rulefmt, unknown fields refused), and
// returns every error it finds.
func ParseRules(content []byte) (*rulefmt.RuleGroups, error) {
	groups, errs := rulefmt.Parse(content, false, model.UTF8Validation, promQL, slog.New(slog.DiscardHandler))
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return groups, nil
}

// PrometheusRule returns the PrometheusRule (monitoring.coreos.com/v1)
// that carries the groups of the rules file content, as YAML. The file is
// read strictly into the Operator's own types, so a key the Operator
// would not carry is an error here, not a rule dropped in the cluster.
func PrometheusRule(content []byte) ([]byte, error) {
	if _, err := ParseRules(content); err != nil {
		return nil, fmt.Errorf("%s: %w", RulesPath, err)
	}
	var spec monitoringv1.PrometheusRuleSpec
	if err := yaml.UnmarshalStrict(content, &spec); err != nil {
		return nil, fmt.Errorf("%s as a PrometheusRule spec: %w", RulesPath, err)
	}
	rule := monitoringv1.PrometheusRule{
		TypeMeta: metav1.TypeMeta{APIVersion: monitoringv1.SchemeGroupVersion.String(), Kind: monitoringv1.PrometheusRuleKind},
		ObjectMeta: metav1.ObjectMeta{
			Name:   "kvhint",
			Labels: map[string]string{"app.kubernetes.io/name": "kvhint"},
		},
		Spec: spec,
	}
	out, err := yaml.Marshal(rule)
	if err != nil {
		return nil, err
	}
	header := "# Generated from " + RulesPath + " by tools/observability\n" +
		"# (make observability-gen); edit that file, not this one.\n"
	return append([]byte(header), out...), nil
}

// MetricNames returns the names of the metrics a PromQL expression
// selects, sorted and without repeats. A selector without a metric name
// is an error: every query here names the metric it reads.
func MetricNames(expr string) ([]string, error) {
	node, err := promQL.ParseExpr(expr)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var errs []error
	parser.Inspect(node, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		for _, m := range vs.LabelMatchers {
			if m.Name == labels.MetricName && m.Type == labels.MatchEqual {
				name = m.Value
			}
		}
		if name == "" {
			errs = append(errs, fmt.Errorf("selector %s names no metric", vs))
			return nil
		}
		seen[name] = true
		return nil
	})
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	return names, nil
}
