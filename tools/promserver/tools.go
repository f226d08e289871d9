//go:build tools

// Package tools pins the command this module's tests build: the
// Prometheus server, from its Go module.
package tools

import _ "github.com/prometheus/prometheus/cmd/prometheus"
