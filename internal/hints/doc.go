// Package hints is the core of kv-hint-operator: the hint plugin API, the
// catalog that links plugins into a build, the hints YAML model, the start-up
// rules and the compiled role/hint graph.
//
// The operator, the offline CLI and the router sidecar all validate through
// Compile, so a configuration that one of them accepts is accepted by all.
package hints
