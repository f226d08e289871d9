// Package dispatch is the public dispatcher: it turns a router's booking
// into at most one hint message for the booked worker, by running the
// booked role's hint policies from a compiled hints config.
//
// The kvhint sidecar wraps it in an HTTP booking API, config watches and
// delivery; a Go router can link it in-process instead and skip the hop:
//
//	d := dispatch.NewDispatcher(dispatch.Options{Catalog: builtin.NewCatalog(), Workers: workers, RouterMode: "kv"})
//	if err := d.Load(policyFile, "hints.yaml"); err != nil { ... }
//	h, err := d.Build(ctx, &dispatch.Booking{RequestID: id, Role: "decode", Worker: w, ...})
//	// h.Message is the hint JSON for the worker, or nil; h.Outcome says why.
//	body, err = dispatch.CarryHint(body, h.Message, dispatch.InBandKVHint)
//	// body is the request to forward, the hint carried in-band.
//
// Engines read hints on the requests they serve; CarryHint puts a message
// where an engine reads it (see InBandPath). The sidecar's booking answer
// is the same message, for routers that book over HTTP.
//
// A Dispatcher reads an immutable compiled snapshot through an atomic
// pointer, so Load never disturbs a booking in flight, and a booking
// allocates only the message it returns: nothing, when the router lends the
// memory for it (BuildInto).
//
// Metrics is the hook a host fills to count what the dispatcher does; the
// sidecar exports it to Prometheus (internal/sidecar/dispatchmetrics), and
// nil counts nothing. Its imports are the plugin contract, the booking
// API's type (pkg/bookingapi: Booking is bookingapi.Booking), the hints
// config rules and logr: no metrics library, no Kubernetes client, no file
// watches, no HTTP server.
//
// Experimental until v1: see CHANGELOG.md at the repository root.
package dispatch
