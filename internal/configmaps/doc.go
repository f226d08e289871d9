// Package configmaps writes a router's ConfigMaps: the compiled
// "<router>-hints" one (Writer.Apply, by server-side apply with forced
// ownership, so that hand edits are undone; Writer.Delete once the router
// has no RouterRoles left) and a staged rollout's immutable candidates,
// "<router>-hints-<hash>" (Writer.Candidate, which also prunes the
// rollout's old ones). What to write is decided by the compile step
// (internal/rolegraph) and the rollout (internal/rollout); this package
// only compares, writes and deletes.
//
// It imports the API types, internal/compiled, internal/rolegraph,
// client-go and controller-runtime's client; never controllers.
package configmaps
