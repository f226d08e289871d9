// Package chart renders the Helm chart charts/kv-hint-operator with Helm's
// own Go SDK (loader, values with the chart's schema, the template engine
// in strict mode) and config/ with kustomize's, so that tests, and
// `make release`, read both the way helm and kubectl do.
//
// It is a module of its own: Helm and kustomize are tools of the
// repository, never dependencies of the kvhint binary.
package chart
