// Package hintsconfig is the hints YAML that routers run (the format the
// operator compiles RouterRoles into, `kvhint validate` checks and the
// sidecar loads), its start-up rules and the compiled role/hint graph.
//
// ParseConfig reads a document, Compile checks it against a catalog and
// returns a Graph ready to run together with every problem found, each with
// a stable Reason. The operator, the offline CLI, the sidecar and routers
// that link pkg/dispatch all validate through Compile, so a configuration
// that one of them accepts is accepted by all.
//
// A file is checked for a Target: TargetSidecar, the kvhint sidecar, or
// TargetDynamo, a released Dynamo Frontend, whose own parse and start-up
// checks it then applies (ParseConfigFor, CompileFor).
//
// Experimental until v1: see CHANGELOG.md at the repository root.
package hintsconfig
