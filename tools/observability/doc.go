// Package observability holds kv-hint-operator's monitoring as code and
// its checks: the alert rules (a Prometheus rules file, and the
// PrometheusRule generated from it), the Grafana dashboard (built with the
// Grafana Foundation SDK, written as JSON and as a ConfigMap Grafana's
// sidecar loads), and the names of the metrics the product exports.
//
// It is a module of its own so that Prometheus, the Prometheus Operator's
// API types and the Grafana SDK never enter the product's go.mod; it
// reaches the product through a replace of ../.. . `go run
// ./cmd/observability-gen` (make observability-gen at the repository root)
// writes the generated files; the tests fail when they are stale.
package observability
