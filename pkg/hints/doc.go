// Package hints is the contract between kv-hint-operator and hint policy
// plugins: what a policy is given for a booking (HintContext), what it
// returns (Action, Payload), and how a provider registers it in a Catalog.
//
// A plugin, in the order of the steps a team takes:
//
//  1. Implement HintPolicy. BuildHints runs once per booking on the
//     router's booking path, concurrently: it reads the HintContext,
//     returns actions, keeps nothing of the context and never blocks.
//  2. Write payloads with an ObjectWriter (keys must ascend, the result is
//     valid JSON by construction), in the memory the dispatcher lends
//     through HintContext.PayloadWriter, or wrap bytes with RawPayload;
//     return actions that differ per booking in HintContext.Actions.
//  3. Describe it with a HintProvider: its type name, the commitments it
//     consumes (KVCopy to see the booking's committed KV copy), the
//     worker-selection policies it runs under by default (WorkerSelection,
//     AnyWorkerSelection), and a Parse that decodes parameters strictly
//     with DecodeParams and the range helpers, naming the key at fault.
//  4. Register the provider in a Catalog (builtin.NewCatalog holds the
//     built-ins) and hand the catalog to the kvhint entry point
//     (cmd/kvhint/app.Main) or to an in-process dispatcher (pkg/dispatch).
//  5. Test it with the conformance kit, pkg/hints/hintstest.
//
// Whatever a policy returns passes CheckAction before it is sent: a valid
// type and version, a well-formed payload within MaxPayloadBytes, and the
// rules of the engines that consume known action types. An action that
// fails drops only its own policy's actions.
//
// Experimental until v1: breaking changes are listed in CHANGELOG.md at
// the repository root, and a guard in `make verify` keeps them deliberate.
package hints
