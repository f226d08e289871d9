// Package dispatchmetrics exports the dispatcher's metrics to Prometheus:
// Metrics is the implementation of dispatch.Metrics the kvhint sidecar
// registers on its /metrics registry, with the series names, labels, help
// texts and buckets docs/reference/metrics.md lists and the alerts and
// dashboard read. Namespace, the prefix of every sidecar series, lives here
// with them.
//
// It holds only the Prometheus side of the hook: the dispatcher decides
// what to count and when (pkg/dispatch), this package how it is exported.
// It may import pkg/dispatch and Prometheus's client, and nothing else of
// the sidecar, so that every part of the sidecar can import it.
package dispatchmetrics
