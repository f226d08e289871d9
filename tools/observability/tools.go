//go:build tools

// Package tools pins the commands this module's tests build: promtool,
// for the rule unit tests, and controller-gen, which makes the
// Prometheus Operator's CRDs from its pinned API types for the apply
// test (the Operator's own module, which ships them, is not served).
package tools

import (
	_ "github.com/prometheus/prometheus/cmd/promtool"
	_ "sigs.k8s.io/controller-tools/cmd/controller-gen"
)
