// Package promserver builds a Prometheus server from its Go module and
// runs it on loopback, for the tests that need a real one: the rollout's
// Prometheus provider (internal/rollout/provider) is tested here against
// the server's own query engine and HTTP API, scraping real /metrics
// endpoints.
//
// It is a module of its own so that Prometheus' server and its
// dependencies never enter the product's go.mod; it reaches the product
// through a replace of ../.. . The server is built with Prometheus' own
// remove_all_sd tag, which leaves out the service discoveries (the cloud
// providers' SDKs, most of a cold build): the tests scrape static
// targets. A cold build takes about 4 CPU-minutes; Go's build cache makes
// the next one take seconds.
package promserver
