// Package workload writes a restart-mode router's compiled config to its
// workloads: Deployments (v1alpha1.RouterContainerAnnotation) and
// Dynamo's DynamoGraphDeployments (v1alpha1.RouterComponentAnnotation).
// Each kind is a Writer with the same verbs (List the router's workloads,
// Point one at a config revision); Rollout runs them for a router and
// keeps the immutable revision ConfigMaps: it creates the compiled one and
// deletes those nothing references any more. GraphWatch starts the
// DynamoGraphDeployment cache once the API server serves the CRD
// (apiwatch.WhenServed).
//
// A RouterRollout's first step holds a router Deployment at one surge pod
// and its end releases it (Deployments.Hold, Deployments.Release): merge
// patches of spec.strategy, spec.minReadySeconds, spec.paused and
// v1alpha1.HeldAnnotation, never of what a pod runs.
//
// Every write of a template is the manager's three entries
// (PolicyEntries), by server-side apply as v1alpha1.RolloutFieldManager; a
// write the API server or the manager's check of a dry run refuses is a
// *Refused, which the router reconciler reports and tries again later. What to write
// (which workloads, which revision, what is stale) is decided by the
// compile step, internal/rolegraph; this package only reads and writes.
//
// It imports the API types, internal/rolegraph, internal/dynamograph,
// internal/apiwatch, client-go and controller-runtime's client and cache;
// never controllers.
package workload
