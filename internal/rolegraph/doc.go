// Package rolegraph is the compile step of the operator, as a pure
// function: the RouterRoles and HintPolicies of a namespace go in, with the
// compiled ConfigMaps that exist now, the router Pods and Deployments; out
// come, per router, the compiled hints YAML and the ConfigMap that carries
// it (and, for a restart-mode router, the immutable revision its opted-in
// Deployments mount), and the status of every input object. A restart-mode
// router's roles are checked under the mode its pod template starts
// Dynamo's router with (workload.go).
//
// The rules are those of pkg/hintsconfig, the same code the CLI and the
// router sidecar run, and the compiled ConfigMap's format (hints.yaml,
// roles.yaml, the hash) is internal/compiled's: rolegraph only resolves
// references, decides which RouterRole owns a router's role, keeps the last
// accepted entry of a role whose new spec is invalid, and turns problems
// into conditions. The manager, `kvhint validate` and `kvhint compile` all call
// Compile, so they cannot disagree.
package rolegraph
