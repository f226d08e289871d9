package analysis

import (
	"math"
	"slices"
)

// Alternative is the direction a one-sided test looks for.
type Alternative int

const (
	// Less tests whether x tends to be smaller than y.
	Less Alternative = iota
	// Greater tests whether x tends to be larger than y.
	Greater
)

// ExactMax is the largest sample, per side, for which MannWhitneyU
// computes the exact p-value; above it, or when values tie, it uses the
// normal approximation.
const ExactMax = 50

// MannWhitneyResult is the outcome of a Mann-Whitney U test.
type MannWhitneyResult struct {
	// U is x's statistic: the pairs (x[i], y[j]) with x[i] > y[j], plus
	// half the pairs that tie. It runs from 0 to len(x)*len(y).
	U float64
	// P is the one-sided p-value in the direction asked for.
	P float64
	// Exact is set when P comes from U's exact distribution rather than
	// the normal approximation.
	Exact bool
}

// MannWhitneyU tests whether x tends to be smaller (Less) or larger
// (Greater) than y, without assuming a distribution: a rank-sum test, as
// Kayenta judges canaries.
//
// With no ties and at most ExactMax values per side, P is exact: the
// share of the C(n+m, n) equally likely rankings with a U at least as
// extreme. Otherwise P comes from the normal approximation with the tie
// correction of the variance and a continuity correction of 0.5, which
// is what scipy.stats.mannwhitneyu(method="asymptotic") computes. Its
// limits: with ties and small samples (fewer than about 10 per side) the
// approximation can be off by a few points of p, and with nearly all
// values tied (say, prefix-hit ratios that are all 0 or 1) the test has
// little power; both arms holding one value only gives P = 1. An empty
// side gives U = 0 and P = 1.
//
// x and y are read, not changed; sorted input (ascending) is used as it
// is, other input is sorted in a copy.
func MannWhitneyU(x, y []float64, alt Alternative) MannWhitneyResult {
	if !slices.IsSorted(x) {
		x = slices.Sorted(slices.Values(x))
	}
	if !slices.IsSorted(y) {
		y = slices.Sorted(slices.Values(y))
	}
	return mannWhitneySorted(x, y, alt)
}

// mannWhitneySorted is MannWhitneyU on sorted samples: it merges the two
// instead of ranking a combined copy, so it allocates nothing on the
// normal path.
func mannWhitneySorted(x, y []float64, alt Alternative) MannWhitneyResult {
	nx, ny := len(x), len(y)
	if nx == 0 || ny == 0 {
		return MannWhitneyResult{P: 1}
	}
	// Walk both sorted samples one distinct value at a time; a group of
	// t tied values holds ranks r+1..r+t, each given the midrank.
	var rankSumX, tieSum float64
	rank := 0
	ties := false
	for i, j := 0, 0; i < nx || j < ny; {
		var v float64
		switch {
		case j == ny || (i < nx && x[i] <= y[j]):
			v = x[i]
		default:
			v = y[j]
		}
		cx, cy := 0, 0
		for i < nx && x[i] == v {
			i++
			cx++
		}
		for j < ny && y[j] == v {
			j++
			cy++
		}
		t := cx + cy
		mid := float64(rank) + float64(t+1)/2
		rankSumX += float64(cx) * mid
		if t > 1 {
			ties = true
			ft := float64(t)
			tieSum += ft*ft*ft - ft
		}
		rank += t
	}
	fx := float64(nx)
	u := rankSumX - fx*(fx+1)/2
	if !ties && nx <= ExactMax && ny <= ExactMax {
		return MannWhitneyResult{U: u, P: exactP(nx, ny, u, alt), Exact: true}
	}
	return MannWhitneyResult{U: u, P: normalP(nx, ny, u, tieSum, alt)}
}

// normalP is U's one-sided p-value by the normal approximation: mean
// nx*ny/2, variance nx*ny/12 * ((n+1) - sum(t^3-t)/(n(n-1))) over the
// groups of t tied values, and a continuity correction of 0.5 toward the
// mean.
func normalP(nx, ny int, u, tieSum float64, alt Alternative) float64 {
	fx, fy := float64(nx), float64(ny)
	n := fx + fy
	mean := fx * fy / 2
	variance := fx * fy / 12 * ((n + 1) - tieSum/(n*(n-1)))
	if variance <= 0 {
		// Every value ties: the ranks say nothing.
		return 1
	}
	sd := math.Sqrt(variance)
	var p float64
	if alt == Less {
		p = normalCDF((u - mean + 0.5) / sd)
	} else {
		p = normalCDF(-(u - mean - 0.5) / sd)
	}
	return min(max(p, 0), 1)
}

// exactP is P(U <= u) (Less) or P(U >= u) (Greater) under the null
// hypothesis, for samples of nx and ny values without ties. U's
// distribution is symmetric about nx*ny/2, so the upper tail is the lower
// tail of nx*ny-u. The counts f(i, j, k) of rankings of i x-values and j
// y-values with U = k follow f(i, j, k) = f(i-1, j, k-j) + f(i, j-1, k)
// (the largest value is an x, adding j to U, or a y), summed with
// additions only, so the float64 counts stay accurate; only k <= u is
// computed.
func exactP(nx, ny int, u float64, alt Alternative) float64 {
	k := u
	if alt == Greater {
		k = float64(nx*ny) - u
	}
	limit := int(math.Floor(k + 1e-9))
	if limit < 0 {
		return 0
	}
	if limit >= nx*ny {
		return 1
	}
	width := limit + 1
	prev := make([]float64, (ny+1)*width)
	cur := make([]float64, (ny+1)*width)
	// i = 0: no x-values, U = 0 in the one ranking there is.
	for j := 0; j <= ny; j++ {
		prev[j*width] = 1
	}
	for i := 1; i <= nx; i++ {
		clear(cur)
		cur[0] = 1 // j = 0: only x-values, U = 0.
		for j := 1; j <= ny; j++ {
			row, left, up := cur[j*width:(j+1)*width], cur[(j-1)*width:j*width], prev[j*width:(j+1)*width]
			for kk := 0; kk < width; kk++ {
				c := left[kk]
				if kk >= j {
					c += up[kk-j]
				}
				row[kk] = c
			}
		}
		prev, cur = cur, prev
	}
	var tail float64
	for _, c := range prev[ny*width : (ny+1)*width] {
		tail += c
	}
	return min(tail/binomial(nx+ny, nx), 1)
}

// binomial is C(n, k) as a float64.
func binomial(n, k int) float64 {
	c := 1.0
	for i := 1; i <= k; i++ {
		c = c * float64(n-k+i) / float64(i)
	}
	return c
}

// normalCDF is the standard normal distribution function.
func normalCDF(z float64) float64 { return 0.5 * math.Erfc(-z/math.Sqrt2) }
