// Package controllers holds kvhint manager's reconcilers and their wiring,
// and nothing else: the router and HintPolicy reconcilers, the mappers
// from watched objects to the router they concern, the field indexes,
// Setup (caches, stores, the reconcilers) and the RouterRole status
// writer. The jobs they call on live in packages of their own: the
// compile step in internal/rolegraph, the store of declared catalogs in
// internal/declared (Store), the writes to restart-mode workloads in
// internal/workload, waiting for a CRD to be served in internal/apiwatch
// and the manager's Prometheus collector in internal/managermetrics.
//
// The router reconciler works per router, not per RouterRole: the compiled
// ConfigMap "<router>-hints" is one object per (namespace, router) and
// RoleConflict is decided among the roles of one router, so every event
// (a RouterRole, a HintPolicy it references, the ConfigMap, a router Pod)
// is mapped to the router key it concerns and the reconciler recompiles that
// router as a whole, through the pure rolegraph.Compile. It keeps no state
// between runs: the last accepted entry of each role is read back from the
// ConfigMap, so a restart changes nothing. Each reconcile computes, runs
// its side effects (the ConfigMap, the rollout) and writes the roles'
// status once, at its single exit.
//
// For a restart-mode router (a Deployment that opts in with
// v1alpha1.RouterContainerAnnotation, or a DynamoGraphDeployment with
// v1alpha1.RouterComponentAnnotation) it also rolls the compiled config
// out through workload.Rollout: an immutable revision ConfigMap, the
// manager's three entries on it in each workload's pod template, and the
// removal of revisions nothing references; Deployments, ReplicaSets and
// DynamoGraphDeployments are mapped to their router by label too.
//
// The HintPolicy reconciler writes HintPolicy status only: whether the
// policy is valid on its own and which RouterRoles use it.
//
// It imports the API types, the internal packages above and
// controller-runtime; nothing imports it but the manager's command
// (internal/cli) and tools that register its metrics.
package controllers
