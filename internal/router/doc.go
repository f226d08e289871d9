// Package router is the router sidecar (`kvhint sidecar`): the process in
// each router pod that turns every booking into at most one hint message for
// the booked worker.
//
// The parts, one file each:
//
//   - Dispatcher: runs a role's hint policies on a booking, numbers and
//     encodes the actions they keep, and hands the hint to delivery. It reads
//     an immutable compiled snapshot through an atomic pointer, so a reload
//     never disturbs a booking in flight.
//   - Config sources: a mounted directory or file (fsnotify on the
//     directory, polling as a fallback) or a watched ConfigMap. Every
//     document is validated with hints.ParseConfig and hints.Compile; the
//     last good snapshot stays in place on any error.
//   - Registry: the workers that may receive hints, from pods (Kubernetes),
//     a file or the HTTP API (standalone).
//   - Delivery: one bounded queue and sender per worker, off the booking
//     path, over keep-alive connections; newest hint dropped when full,
//     nothing retried.
//   - API: POST /v1/bookings and the worker endpoints on loopback;
//     /metrics, /healthz and /readyz on a second listener.
//   - PodReporter: writes the applied config hash on the sidecar's own Pod.
package router
