// Package declared reads a router's declared policy catalog (kind
// PolicyCatalog): the hint and worker-selection policy types a router's
// own build links, with their commitments, default hosts and parameters as
// OpenAPI v3 schemas, for routers whose policies the operator cannot link
// (Dynamo's router links Rust crates at build time). It turns a
// declaration into a *hints.Catalog, so that the rules of pkg/hintsconfig
// check roles against it unchanged, with the same reasons and messages as
// for linked plugins.
//
// Parameters are checked the way the Kubernetes API server checks a custom
// resource: a structural schema, pruning to find unknown keys, defaulting,
// OpenAPI schema validation and x-kubernetes-validations CEL rules, all
// from k8s.io/apiextensions-apiserver. Problems are worded as
// hints.DecodeParams words them, so a declared type and a linked one
// refuse the same parameters with the same message.
//
// Declared types are for validation only. Their hint policies never build
// hints (BuildHints returns ErrDeclaredOnly): the sidecar runs the catalog
// its binary links, never a declared one.
//
// Store is the manager's store of loaded declarations: one load per
// distinct text, shared by every ConfigMap that holds it, run in the
// background one at a time, within Limits (a Budget per declaration, the
// estimated memory per namespace and in all, a reserve for small
// namespaces), with each router's last good declaration kept for when a
// newer one cannot be used. The manager's controllers ask it for a
// router's catalog (ForRouter) and hear from it when a load ends;
// PolicyStatus checks a HintPolicy against the linked catalog or the
// declarations of its namespace, and Namespaces says where declarations
// are read.
//
// The package is internal: a declaration is read by the manager and by
// kvhint validate, not by plugin builds, and what it holds is the
// product's file format, not a contract for plugins. It imports pkg/hints,
// pkg/hintsconfig (for the policy-file form a declaration names), the API
// types, internal/dynamograph, the apiextensions and CEL libraries and,
// for Store, controller-runtime's client and cache and internal/rolegraph
// (which words a declaration's findings); never controllers.
package declared
