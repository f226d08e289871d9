package hints

import (
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
)

func TestAppendUint64MatchesStrconv(t *testing.T) {
	check := func(v uint64) {
		t.Helper()
		if got, want := string(appendUint64([]byte("x"), v)), "x"+strconv.FormatUint(v, 10); got != want {
			t.Fatalf("appendUint64(%d) = %s, want %s", v, got, want)
		}
	}
	// Every power of ten and its neighbours: the chunk boundaries.
	for p := uint64(1); ; p *= 10 {
		check(p - 1)
		check(p)
		check(p + 1)
		if p > math.MaxUint64/10 {
			break
		}
	}
	check(0)
	check(math.MaxUint64)
	check(1e8 * 1e8)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 200000; i++ {
		v := rng.Uint64()
		check(v)
		check(v >> rng.UintN(64)) // every length
	}
}

// TestAppendUint64List: the list writer equals strconv, joined by commas,
// at every length and after any prefix.
func TestAppendUint64List(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for n := range 300 {
		v := make([]uint64, n)
		want := []byte("pre")
		for i := range v {
			v[i] = rng.Uint64() >> rng.UintN(64)
			if i > 0 {
				want = append(want, ',')
			}
			want = strconv.AppendUint(want, v[i], 10)
		}
		if got := appendUint64List([]byte("pre"), v); string(got) != string(want) {
			t.Fatalf("%d values: %s, want %s", n, got, want)
		}
	}
}

func FuzzAppendUint64(f *testing.F) {
	f.Add(uint64(0))
	f.Add(uint64(math.MaxUint64))
	f.Fuzz(func(t *testing.T, v uint64) {
		if got, want := string(appendUint64(nil, v)), strconv.FormatUint(v, 10); got != want {
			t.Fatalf("appendUint64(%d) = %s", v, got)
		}
	})
}

func BenchmarkAppendUint64(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	hashes := make([]uint64, 64)
	for i := range hashes {
		hashes[i] = rng.Uint64()
	}
	buf := make([]byte, 0, 21*len(hashes))
	b.Run("hints", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			buf = buf[:0]
			for _, h := range hashes {
				buf = appendUint64(buf, h)
			}
		}
	})
	b.Run("list", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			buf = appendUint64List(buf[:0], hashes)
		}
	})
	b.Run("strconv", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			buf = buf[:0]
			for _, h := range hashes {
				buf = strconv.AppendUint(buf, h, 10)
			}
		}
	})
}
