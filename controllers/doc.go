// Package controllers holds kvhint manager's reconcilers and their wiring
// only: the router, RouterRollout and HintPolicy reconcilers, the mappers
// from watched objects to the router they concern, the field indexes,
// Setup and the status writer. What they call on lives apart: the compile
// step in internal/rolegraph, what a router's compile reads in
// internal/routerinput, the compiled ConfigMap's and a rollout's
// candidates' writes in internal/configmaps, the store of declared
// catalogs and the HintPolicy check in internal/declared (Store), the
// writes to restart-mode Deployments and DynamoGraphDeployments in
// internal/workload (Rollout), the manager's cache settings in
// internal/managercache, the wait for a CRD in internal/apiwatch and the
// Prometheus collector in internal/managermetrics. It imports those, the API types and
// controller-runtime; only the manager's command and its tools import it.
//
// The router reconciler works per router, not per RouterRole: the compiled
// ConfigMap "<router>-hints" is one object per (namespace, router) and
// RoleConflict is decided among the roles of one router, so every event
// (a RouterRole, a HintPolicy it references, the ConfigMap, a router Pod,
// a workload) is mapped to its router and the reconciler recompiles that
// router as a whole, through the pure rolegraph.Compile. The last accepted
// entry of each role is read back from the ConfigMap, so a restart changes
// nothing. Each reconcile computes, runs its side effects (the ConfigMap,
// the rollout of a restart-mode router) and writes the roles' status once,
// at its single exit.
//
// The HintPolicy reconciler writes HintPolicy status only: whether the
// policy is valid on its own and which RouterRoles use it.
package controllers
