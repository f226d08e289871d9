// Package analysis judges a staged rollout's candidate config against the
// stable config it would replace, the way a canary analysis does: the
// metrics of the requests each config booked (prefix-hit ratio, TTFT p50
// and p90, error rate, rate of hints the workers rejected), the tests that
// say whether a difference is more than chance (Mann-Whitney U for the
// per-session prefix-hit ratios and mean TTFTs, a two-proportion z-test
// with a cluster-robust variance over sessions for the rates), and the
// verdict of one measurement (Successful, Failed or Inconclusive) with the
// figures that decided it. It also judges a shadow step from the config
// status the router pods report.
//
// The unit is the session because the canary splits sessions: a
// session's turns share its cache (a later turn hits what an earlier one
// left), so counting each request as an independent observation
// over-counts the evidence and fails harmless candidates more often than
// the significance says (aa_study_test.go measures it on the Mooncake
// trace). A sample without a session key is a session of its own.
//
// Baseline and canary are the requests the stable and the candidate
// config booked in the same pods over the same window, so both arms share
// workers and cache age; a candidate is judged on what it changes, not on
// how warm the pods that run it are.
//
// The package is pure: values in, verdicts out, no client, clock or I/O,
// so a restarted manager that feeds it the same samples reaches the same
// verdict. It imports the standard library and internal/rolloutapi only;
// the metric providers (internal/rollout/provider) fetch what it judges.
package analysis
