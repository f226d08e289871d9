// Package analysis judges a staged rollout's candidate config against the
// stable config it would replace, the way a canary analysis does: the
// metrics of the requests each config booked (prefix-hit ratio, TTFT p50
// and p90, error rate, rate of hints the workers rejected), the tests that
// say whether a difference is more than chance (Mann-Whitney U for the
// per-request prefix-hit ratios and TTFTs, a two-proportion z-test for the
// rates), and the verdict of one measurement (Successful, Failed or
// Inconclusive) with the figures that decided it. It also judges a shadow
// step from the config status the router pods report.
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
