package analysis

import "math"

// ProportionResult is the outcome of a two-proportion z-test.
type ProportionResult struct {
	// Z is the test statistic: the difference of the rates over its
	// standard error under the pooled rate.
	Z float64
	// P is the one-sided p-value in the direction asked for.
	P float64
}

// TwoProportionZ tests whether the rate x2/n2 is larger (Greater) or
// smaller (Less) than x1/n1, with the pooled-rate z-test. Its limit: the
// normal approximation wants about 5 events and 5 non-events expected in
// each group (n*p >= 5); below that (a handful of errors in a few hundred
// requests) p is approximate, and a rate of 0 in both groups gives P = 1.
// Counts out of range (x > n, negatives, an empty group) give P = 1: no
// evidence.
func TwoProportionZ(x1, n1, x2, n2 int64, alt Alternative) ProportionResult {
	if n1 <= 0 || n2 <= 0 || x1 < 0 || x2 < 0 || x1 > n1 || x2 > n2 {
		return ProportionResult{P: 1}
	}
	f1, f2 := float64(n1), float64(n2)
	p1, p2 := float64(x1)/f1, float64(x2)/f2
	pooled := float64(x1+x2) / (f1 + f2)
	se := math.Sqrt(pooled * (1 - pooled) * (1/f1 + 1/f2))
	if se == 0 {
		return ProportionResult{P: 1}
	}
	z := (p2 - p1) / se
	p := normalCDF(-z)
	if alt == Less {
		p = normalCDF(z)
	}
	return ProportionResult{Z: z, P: p}
}
