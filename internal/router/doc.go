// Package router is the router sidecar (`kvhint sidecar`): the process in
// each router pod that runs the public dispatch core (pkg/router) for
// routers that book over HTTP, and delivers the hints.
//
// The parts, one file each:
//
//   - Config sources: a mounted directory or file (fsnotify on the
//     directory, polling as a fallback) or a watched ConfigMap, each feeding
//     Dispatcher.Load; the last good snapshot stays in place on any error.
//   - Registry: the workers that may receive hints, from pods (Kubernetes),
//     a file or the HTTP API (standalone); it is the dispatcher's Workers.
//   - Delivery: one bounded queue and sender per worker, off the booking
//     path, over keep-alive connections; newest hint dropped when full,
//     nothing retried.
//   - API: POST /v1/bookings and the worker endpoints on loopback;
//     /metrics, /healthz and /readyz on a second listener.
//   - PodReporter: writes the applied config hash on the sidecar's own Pod.
//
// A booking's path: API.book decodes the body (decode.go), Dispatcher.Book
// runs the policies and calls Worker.Deliver, which queues the message for
// the worker's sender (delivery.go).
package router
