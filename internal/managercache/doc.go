// Package managercache holds the settings of the kvhint manager's
// informer cache (Options): which objects it keeps and what of each.
//
// ConfigMaps and Pods are cached only when they carry the router label
// (ConfigMaps only when the manager wrote them), Deployments and
// ReplicaSets only a router's, so that the manager's memory follows the
// number of routers, not the size of the cluster. Of each object it keeps
// only what the reconcilers read: no managedFields (server-side apply
// makes them large); of a router pod its metadata, phase, Ready
// condition, pod IP, the sidecar's ops port and its configMap volumes,
// and of its annotations only the reports its own sidecar wrote (a value
// set by anyone else is not a report); of a ReplicaSet its metadata and
// the ConfigMaps its pod template mounts. Its watches wait out an API
// server outage (apiwatch.Patient).
//
// It imports the API types, internal/apiwatch, internal/rolloutapi and
// internal/rollout/provider (for names only), client-go and
// controller-runtime's cache; never controllers.
package managercache
