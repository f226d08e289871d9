// Package filecheck reads the files kvhint's offline commands (validate,
// compile, preview) are given, hints YAML files and manifests of
// RouterRoles and HintPolicies, checks and compiles them as the sidecar
// and the manager would (pkg/hintsconfig, internal/rolegraph), and
// reports every problem at its FILE:LINE, as text or as JSON. It imports
// the API types, the compile step, the declared-catalog loader and
// yaml.v3; internal/cli holds the commands and their flags.
package filecheck
