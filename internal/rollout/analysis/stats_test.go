package analysis

import (
	"math"
	"math/rand/v2"
	"testing"
)

// The expected values below come from two sources, each named at its
// case: the worked example of scipy.stats.mannwhitneyu's documentation
// (SciPy 1.x reference, "Examples": U1 = 17, exact two-sided p =
// 0.1111111111111111, asymptotic two-sided p = 0.11134688653314041), and
// computations by hand shown in the comments, read off a standard normal
// table where a normal tail is needed.

func TestMannWhitneyKnownValues(t *testing.T) {
	// SciPy's example: ages at diagnosis, males x and females y.
	males := []float64{19, 22, 16, 29, 24}
	females := []float64{20, 11, 17, 12}

	t.Run("exact, scipy example", func(t *testing.T) {
		r := MannWhitneyU(males, females, Greater)
		if r.U != 17 || !r.Exact {
			t.Fatalf("U = %v exact %v, want 17 exact", r.U, r.Exact)
		}
		// One-sided is half SciPy's two-sided 0.1111...: 7 of the
		// C(9,4) = 126 rankings have U >= 17 (by symmetry U <= 3:
		// one ranking each with U = 0 and 1, two with U = 2, three
		// with U = 3).
		if want := 7.0 / 126; math.Abs(r.P-want) > 1e-12 {
			t.Fatalf("P = %v, want 7/126 = %v", r.P, want)
		}
		// The other direction is the other tail: P(U <= 17) = 1 - P(U >= 18) = 1 - 4/126.
		if r := MannWhitneyU(males, females, Less); math.Abs(r.P-122.0/126) > 1e-12 {
			t.Fatalf("Less P = %v, want 122/126", r.P)
		}
		// Swapping the samples mirrors U: 5*4 - 17 = 3.
		if r := MannWhitneyU(females, males, Less); r.U != 3 || math.Abs(r.P-7.0/126) > 1e-12 {
			t.Fatalf("swapped: U = %v P = %v, want 3 and 7/126", r.U, r.P)
		}
	})

	t.Run("normal approximation, scipy example", func(t *testing.T) {
		// SciPy's asymptotic two-sided p for the same data, halved.
		got := normalP(5, 4, 17, 0, Greater)
		if want := 0.11134688653314041 / 2; math.Abs(got-want) > 1e-12 {
			t.Fatalf("P = %.17g, want %.17g", got, want)
		}
	})

	t.Run("ties, by hand", func(t *testing.T) {
		// x = 1 2 2, y = 2 3 3 3. Ranks: 1 -> 1; the three 2s hold
		// ranks 2..4, midrank 3; the three 3s hold 5..7, midrank 6.
		// R_x = 1+3+3 = 7, U = 7 - 3*4/2 = 1 (pairs: the two x=2 tie
		// with y=2, 0.5 each). Tie term sum(t^3-t) = 24+24 = 48,
		// variance = 3*4/12 * (8 - 48/42) = 6.857143, sd 2.618615,
		// mean 6, z = (1-6+0.5)/2.618615 = -1.71847, and the normal
		// table gives Phi(-1.71847) = 0.04286 (between 0.04363 at
		// -1.71 and 0.04272 at -1.72).
		r := MannWhitneyU([]float64{2, 1, 2}, []float64{3, 2, 3, 3}, Less)
		if r.U != 1 || r.Exact {
			t.Fatalf("U = %v exact %v, want 1 by the normal approximation (ties)", r.U, r.Exact)
		}
		if math.Abs(r.P-0.04286) > 2e-4 {
			t.Fatalf("P = %v, want 0.04286", r.P)
		}
	})

	t.Run("critical values of the published table", func(t *testing.T) {
		// The one-tailed alpha = 0.05 critical values of U in the
		// Mann-Whitney tables printed in statistics textbooks (n1 = n2
		// = 5: 4; 10: 27; 20: 138): the largest U with P(U <= u) <=
		// 0.05. Arrange x below y so that U takes exactly the value
		// asked for, and check both sides of the critical value.
		for _, c := range []struct{ n, crit int }{{5, 4}, {10, 27}, {20, 138}} {
			r := MannWhitneyU(samplesWithU(c.n, c.crit))
			if r.U != float64(c.crit) || !r.Exact {
				t.Fatalf("n = %d: U = %v exact %v, want %d exact", c.n, r.U, r.Exact, c.crit)
			}
			at := r.P
			above := MannWhitneyU(samplesWithU(c.n, c.crit+1)).P
			if !(at <= 0.05 && above > 0.05) {
				t.Errorf("n = %d: P(U <= %d) = %v, P(U <= %d) = %v; want the first <= 0.05 < the second",
					c.n, c.crit, at, c.crit+1, above)
			}
		}
	})

	t.Run("extremes", func(t *testing.T) {
		// All of x below all of y: U = 0, P = 1/C(2n, n).
		x, y := []float64{1, 2, 3}, []float64{4, 5, 6}
		if r := MannWhitneyU(x, y, Less); r.U != 0 || math.Abs(r.P-1.0/20) > 1e-15 {
			t.Fatalf("U = %v P = %v, want 0 and 1/20", r.U, r.P)
		}
		if r := MannWhitneyU(nil, y, Less); r.P != 1 {
			t.Fatalf("empty x: P = %v, want 1", r.P)
		}
		if r := MannWhitneyU([]float64{1, 1, 1}, []float64{1, 1}, Less); r.P != 1 {
			t.Fatalf("all tied: P = %v, want 1", r.P)
		}
	})
}

// samplesWithU builds n x-values and n y-values, without ties, whose U
// (x's) is u: x starts all below y, and each step moves one x above one
// more y.
func samplesWithU(n, u int) ([]float64, []float64, Alternative) {
	x := make([]float64, n)
	y := make([]float64, n)
	for j := range y {
		y[j] = float64(10 * (j + 1))
	}
	// x[i] is placed above k_i of the y-values, k summing to u, each k_i <= n.
	for i := n - 1; i >= 0; i-- {
		k := min(u, n)
		u -= k
		x[i] = float64(10*k) + 5 - float64(i)*0.01
	}
	return x, y, Less
}

func TestExactAgreesWithNormalForLargerSamples(t *testing.T) {
	// At n = 50 per side the exact p and the normal approximation agree
	// within a few thousandths: the check that both paths compute the
	// same tail.
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20 {
		x, y := make([]float64, 50), make([]float64, 50)
		for i := range x {
			x[i], y[i] = rng.Float64(), rng.Float64()+0.1
		}
		r := MannWhitneyU(x, y, Less)
		if !r.Exact {
			t.Fatal("want the exact p at 50 per side")
		}
		if approx := normalP(50, 50, r.U, 0, Less); math.Abs(approx-r.P) > 0.005 {
			t.Fatalf("U = %v: exact %v, normal %v", r.U, r.P, approx)
		}
	}
}

func TestTwoProportionKnownValues(t *testing.T) {
	// By hand: 10 of 1000 against 30 of 1000. Pooled rate 0.02, standard
	// error sqrt(0.02*0.98*(2/1000)) = 0.0062610, z = 0.02/0.0062610 =
	// 3.19438; the normal table's upper tail at 3.19 is 0.000711 and at
	// 3.20 0.000687, so p = 0.000700.
	r := TwoProportionZ(10, 1000, 30, 1000, Greater)
	if math.Abs(r.Z-3.19438) > 1e-4 || math.Abs(r.P-0.000700) > 5e-6 {
		t.Fatalf("z = %v p = %v, want 3.19438 and 0.000700", r.Z, r.P)
	}
	if r := TwoProportionZ(10, 1000, 30, 1000, Less); math.Abs(r.P-(1-0.000700)) > 5e-6 {
		t.Fatalf("Less: p = %v, want 0.9993", r.P)
	}
	// By hand: 45 of 300 against 60 of 300. Pooled 0.175, se =
	// sqrt(0.175*0.825*(2/300)) = 0.031024, z = 0.05/0.031024 = 1.61165;
	// the table's upper tail is 0.0537 at 1.61 and 0.0526 at 1.62, so p
	// = 0.0535.
	if r := TwoProportionZ(45, 300, 60, 300, Greater); math.Abs(r.Z-1.61165) > 1e-4 || math.Abs(r.P-0.0535) > 2e-4 {
		t.Fatalf("z = %v p = %v, want 1.61165 and 0.0535", r.Z, r.P)
	}
	for _, c := range [][4]int64{{0, 100, 0, 100}, {0, 0, 1, 10}, {5, 4, 1, 10}, {-1, 10, 1, 10}} {
		if r := TwoProportionZ(c[0], c[1], c[2], c[3], Greater); r.P != 1 {
			t.Errorf("%v: P = %v, want 1 (no evidence)", c, r.P)
		}
	}
}

func TestQuantile(t *testing.T) {
	v := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	// Nearest rank: p50 is the 5th value, p90 the 9th.
	if got := Quantile(v, 0.5); got != 5 {
		t.Errorf("p50 = %v, want 5", got)
	}
	if got := Quantile(v, 0.9); got != 9 {
		t.Errorf("p90 = %v, want 9", got)
	}
	if got := Quantile(v[:1], 0.9); got != 1 {
		t.Errorf("p90 of one = %v, want 1", got)
	}
	if got := Quantile(nil, 0.9); got != 0 {
		t.Errorf("p90 of none = %v, want 0", got)
	}
}

func TestMinRankP(t *testing.T) {
	// 1/C(8,4) = 1/70 and 1/C(10,5) = 1/252: four steps per arm cannot
	// reach 0.0125, five can.
	if got := minRankP(4, 4, 0.0125); math.Abs(got-1.0/70) > 1e-15 {
		t.Errorf("4, 4: %v, want 1/70", got)
	}
	if got := minRankP(5, 5, 1e-9); math.Abs(got-1.0/252) > 1e-15 {
		t.Errorf("5, 5: %v, want 1/252", got)
	}
	// It stops once below the level: 1/126 after four of five factors.
	if got := minRankP(5, 5, 0.0125); got >= 0.0125 {
		t.Errorf("5, 5 at 0.0125: %v", got)
	}
	if got := minRankP(16384, 16384, 0.0125); got >= 0.0125 {
		t.Errorf("16384 each: %v", got)
	}
}

// clusters are n clusters of size requests, the first events of them
// failing whole.
func clusters(n, size, events int) []Cluster {
	out := make([]Cluster, n)
	for i := range out {
		out[i].N = int64(size)
		if i < events {
			out[i].X = int64(size)
		}
	}
	return out
}

func TestClusteredProportionKnownValues(t *testing.T) {
	// By hand: 10 of 1000 against 30 of 1000 in clusters of one request.
	// Pooled rate p = 0.02; sum of (x - p*n)^2 is 10*0.98^2 + 990*0.02^2
	// = 10 in the first, 30*0.98^2 + 970*0.02^2 = 29.2 in the second;
	// times K/(K-1) = 1000/999 over N^2 = 1e6: se = sqrt(1.001e-5 +
	// 2.9229e-5) = 0.0062641, z = 0.02/0.0062641 = 3.19279, p =
	// 0.000705: the plain test's 3.19438 but for K/(K-1).
	r := ClusteredTwoProportionZ(clusters(1000, 1, 10), clusters(1000, 1, 30), Greater)
	if math.Abs(r.Z-3.19279) > 1e-4 || math.Abs(r.P-0.000705) > 5e-6 {
		t.Fatalf("clusters of one: z = %v p = %v, want 3.19279 and 0.000705", r.Z, r.P)
	}
	// The same rates in sessions of 10 requests that fail together: 1
	// of 100 sessions against 3 of 100. Sums of squares (10-0.2)^2 +
	// 99*0.2^2 = 100 and 3*9.8^2 + 97*0.2^2 = 292, times 100/99 over
	// 1e6: se = 0.019899, z = 1.00509, p = 0.1574. Ten requests of one
	// session are about one observation, not ten: the plain test would
	// say p = 0.0007.
	r = ClusteredTwoProportionZ(clusters(100, 10, 1), clusters(100, 10, 3), Greater)
	if math.Abs(r.Z-1.00509) > 1e-4 || math.Abs(r.P-0.1574) > 1e-4 {
		t.Fatalf("clusters of ten: z = %v p = %v, want 1.00509 and 0.1574", r.Z, r.P)
	}
	if r := ClusteredTwoProportionZ(clusters(100, 10, 1), clusters(100, 10, 3), Less); math.Abs(r.P-(1-0.1574)) > 1e-4 {
		t.Fatalf("Less: p = %v, want 0.8426", r.P)
	}
	for name, c := range map[string][2][]Cluster{
		"no events":          {clusters(100, 1, 0), clusters(100, 1, 0)},
		"one cluster":        {clusters(1, 100, 1), clusters(100, 1, 3)},
		"more events than N": {{{N: 1, X: 2}, {N: 1}}, clusters(100, 1, 3)},
		"a negative count":   {clusters(100, 1, 1), {{N: -1}, {N: 1}}},
		"no requests at all": {{{}, {}}, clusters(100, 1, 3)},
	} {
		if r := ClusteredTwoProportionZ(c[0], c[1], Greater); r.P != 1 {
			t.Errorf("%s: P = %v, want 1 (no evidence)", name, r.P)
		}
	}
}
