// Package routerinput reads, for the router reconciler, what the compile
// step (rolegraph.Input) needs of one router: its RouterRoles, the
// HintPolicies they reference, its compiled ConfigMap and its pods, from
// the manager's cache, through the RouterIndex field index. The one read
// around the cache is the compiled ConfigMap when the cache has none (its
// labels may have been edited away). Workloads are read by
// internal/workload, declared catalogs by internal/declared.
//
// It imports the API types, internal/rolegraph and controller-runtime's
// client; never controllers.
package routerinput
