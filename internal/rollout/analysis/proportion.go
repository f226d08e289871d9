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

// ClusteredTwoProportionZ is TwoProportionZ for requests that come in
// clusters (sessions): whether the rate of the second group's clusters is
// larger (Greater) or smaller (Less) than the first's. Each rate is the
// ratio of its events to its requests, summed over clusters, and its
// variance the cluster-robust (sandwich, or delta-method) variance of
// that ratio estimator, under the pooled rate:
//
//	V = K/(K-1) * sum_i (x_i - p*n_i)^2 / N^2
//
// for K clusters of n_i requests and x_i events, N requests in all. When
// the turns of a session fail together, this variance grows with them
// (by the design effect), where the plain test's would count every turn
// as independent evidence; with clusters of one request it is the plain
// test's variance, times K/(K-1). A group of fewer than 2 clusters, or
// counts out of range, give P = 1: no evidence.
func ClusteredTwoProportionZ(first, second []Cluster, alt Alternative) ProportionResult {
	return clusteredZ(first, second, func(c Cluster) Cluster { return c }, alt)
}

// clusteredZ is ClusteredTwoProportionZ over any clusters cluster reads,
// so that an arm's session counts are tested where they are.
func clusteredZ[T any](first, second []T, cluster func(T) Cluster, alt Alternative) ProportionResult {
	var x1, n1, x2, n2 int64
	for _, t := range first {
		c := cluster(t)
		if c.N < 0 || c.X < 0 || c.X > c.N {
			return ProportionResult{P: 1}
		}
		x1, n1 = x1+c.X, n1+c.N
	}
	for _, t := range second {
		c := cluster(t)
		if c.N < 0 || c.X < 0 || c.X > c.N {
			return ProportionResult{P: 1}
		}
		x2, n2 = x2+c.X, n2+c.N
	}
	if len(first) < 2 || len(second) < 2 || n1 == 0 || n2 == 0 {
		return ProportionResult{P: 1}
	}
	pooled := float64(x1+x2) / float64(n1+n2)
	variance := func(ts []T, n int64) float64 {
		var ss float64
		for _, t := range ts {
			c := cluster(t)
			d := float64(c.X) - pooled*float64(c.N)
			ss += d * d
		}
		k := float64(len(ts))
		return k / (k - 1) * ss / (float64(n) * float64(n))
	}
	se := math.Sqrt(variance(first, n1) + variance(second, n2))
	if se == 0 {
		return ProportionResult{P: 1}
	}
	z := (float64(x2)/float64(n2) - float64(x1)/float64(n1)) / se
	p := normalCDF(-z)
	if alt == Less {
		p = normalCDF(z)
	}
	return ProportionResult{Z: z, P: p}
}

// Cluster is one cluster's requests N and events X.
type Cluster struct{ N, X int64 }
