// Package hintstest is the conformance kit for hint policy plugins: what
// every plugin must do, checked from the plugin author's own tests.
//
// Call Run from a test with the plugin's provider and a few bookings:
//
//	func TestConformance(t *testing.T) {
//		hintstest.Run(t, myplugin.Provider(), hintstest.Suite{
//			Params:   []string{`{}`, `{"ttl_seconds": 60}`},
//			Bookings: []hintstest.Booking{{RequestID: "r1", Role: "decode", Worker: "w1"}},
//		})
//	}
//
// Run registers the provider in the build's catalog (Suite.Catalog, the
// built-ins when nil), so that what the build would refuse fails the test;
// runs each policy over DefaultBookings, a spread up to the dispatcher's
// booking limit, when the suite names none; logs what fired on each
// booking; and fails a policy that fired on none unless Suite.NeverFires
// says that is intended. Run's doc lists every check, and what it cannot
// catch.
//
// NewContext and BuildHints run a policy on one booking exactly as the
// dispatcher would, for table tests of a plugin's own behaviour.
//
// Experimental until v1: see CHANGELOG.md at the repository root.
package hintstest
