// Package preview replays a trace of bookings through two compiled hints
// configs and reports, per role, what the change does: the actions the
// real dispatcher (pkg/dispatch) builds for each booking under each config,
// and what they do in a deterministic model of the rest, namely the
// router's worker choice (the role's worker selection with its
// parameters: Dynamo's default cost function, its load-only selections,
// kvcr's committed copies), a topology of workers per role, and an LRU KV
// block cache per worker that prefills fill, kv.fetch copies into,
// kv.retain pins for a TTL and kv.evict frees (by default reference-
// counted: a block an active request reads stays). The report opens with
// a verdict read from the headline deltas, their sensitivity to workers
// and cache and their interval over time windows.
//
// It reads Mooncake JSONL traces (with the aliases and session fields of
// Dynamo's replay) and the traces the sidecar records. It imports the
// public hints packages and the dispatcher, nothing of the sidecar or the
// CLI; `kvhint preview` (internal/cli) wires it to the compile step's
// inputs.
package preview
