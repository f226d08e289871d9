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

// FuzzAppendUint64List: the list writer's inline path for 17 to 20 digits
// and its path for shorter values, side by side, against strconv.
func FuzzAppendUint64List(f *testing.F) {
	f.Add(uint64(0), uint64(1e16), uint64(math.MaxUint64))
	f.Add(uint64(1e16-1), uint64(9999999999999999999), uint64(12345678))
	f.Fuzz(func(t *testing.T, a, b, c uint64) {
		want := strconv.AppendUint(nil, a, 10)
		for _, v := range []uint64{b, c} {
			want = strconv.AppendUint(append(want, ','), v, 10)
		}
		if got := appendUint64List(nil, []uint64{a, b, c}); string(got) != string(want) {
			t.Fatalf("appendUint64List(%d, %d, %d) = %s", a, b, c, got)
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

// TestDigits8: every 4-digit value in each half of the word, against the
// digits computed one by one; the halves' lanes are independent, so this
// covers every step of every input.
func TestDigits8(t *testing.T) {
	check := func(v uint32) {
		t.Helper()
		d := digits8(v)
		for i := range 8 {
			want := v / pow10[7-i] % 10
			if got := uint32(d >> (8 * i) & 0xff); got != want {
				t.Fatalf("digits8(%d): digit %d is %d, want %d", v, i, got, want)
			}
		}
	}
	for x := range uint32(10000) {
		check(x*10000 + x)
		check(x*10000 + 9999 - x)
		check(x)
		check(x * 10000)
	}
}

var pow10 = [8]uint32{1, 10, 100, 1000, 10000, 100000, 1000000, 10000000}

// TestPutUpTo4: every value putUpTo4 takes, 1 to 9,999.
func TestPutUpTo4(t *testing.T) {
	b := make([]byte, 8)
	for v := uint32(1); v < 10000; v++ {
		n := putUpTo4(b, 0, v)
		if got, want := string(b[:n]), strconv.FormatUint(uint64(v), 10); got != want {
			t.Fatalf("putUpTo4(%d) = %s", v, got)
		}
	}
}
