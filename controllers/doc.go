// Package controllers holds kvhint manager's reconcilers.
//
// The router reconciler works per router, not per RouterRole: the compiled
// ConfigMap "<router>-hints" is one object per (namespace, router) and
// RoleConflict is decided among the roles of one router, so every event
// (a RouterRole, a HintPolicy it references, the ConfigMap, a router Pod)
// is mapped to the router key it concerns and the reconciler recompiles that
// router as a whole, through the pure rolegraph.Compile. It keeps no state
// between runs: the last accepted entry of each role is read back from the
// ConfigMap, so a restart changes nothing.
//
// For a restart-mode router (a Deployment that opts in with
// v1alpha1.RouterContainerAnnotation) it also writes each compiled config
// as an immutable revision ConfigMap, adds the manager's three entries
// (volume, mount, variable) on it to the Deployment's pod template, and
// removes the revisions no ReplicaSet references (rollout.go);
// Deployments and ReplicaSets are mapped to their router by label too.
//
// The HintPolicy reconciler writes HintPolicy status only: whether the
// policy is valid on its own and which RouterRoles use it.
package controllers
