package hints

import "slices"

// Block hashes are random 64-bit values, so most print as 19 or 20 digits,
// and a kv.fetch carries dozens of them: their decimal formatting is most
// of a booking's cost. appendUint64 splits a value into 8-digit chunks that
// fit in 32 bits, whose two-digit steps are cheaper than strconv's 64-bit
// ones (about 25% faster on 64 random hashes on the development machine).

const twoDigits = "00010203040506070809" +
	"10111213141516171819" +
	"20212223242526272829" +
	"30313233343536373839" +
	"40414243444546474849" +
	"50515253545556575859" +
	"60616263646566676869" +
	"70717273747576777879" +
	"80818283848586878889" +
	"90919293949596979899"

// maxUint64Digits is the length of the longest uint64 in decimal.
const maxUint64Digits = 20

// appendUint64 appends v in decimal, as strconv.AppendUint(dst, v, 10) does.
func appendUint64(dst []byte, v uint64) []byte {
	dst = slices.Grow(dst, maxUint64Digits)
	n := putUint64(dst[:cap(dst)], len(dst), v)
	return dst[:n]
}

// appendUint64List appends the values in decimal, comma separated. It
// grows dst once and then writes by index: on long lists (a kv.fetch of a
// 1M-token prompt has 32,768 hashes) per-value appends cost more than the
// digits, in copies and, while a collection runs, in write barriers.
func appendUint64List(dst []byte, v []uint64) []byte {
	if len(v) == 0 {
		return dst
	}
	dst = slices.Grow(dst, (maxUint64Digits+1)*len(v))
	b := dst[:cap(dst)]
	n := putUint64(b, len(dst), v[0])
	for _, h := range v[1:] {
		b[n] = ','
		n = putUint64(b, n+1, h)
	}
	return dst[:n]
}

// putUint64 writes v in decimal at b[n:], which has room for 20 digits,
// and returns the index after it.
func putUint64(b []byte, n int, v uint64) int {
	if v < 1e8 {
		return putUpTo8(b, n, uint32(v))
	}
	if v < 1e16 {
		n = putUpTo8(b, n, uint32(v/1e8))
		return put8(b, n, uint32(v%1e8))
	}
	rest := v % 1e16
	n = putUpTo8(b, n, uint32(v/1e16))
	n = put8(b, n, uint32(rest/1e8))
	return put8(b, n, uint32(rest%1e8))
}

// put8 writes v < 1e8 as exactly eight digits, leading zeros included.
func put8(b []byte, n int, v uint32) int {
	b = b[n : n+8]
	hi, lo := v/10000, v%10000
	a, c := hi/100*2, hi%100*2
	d, e := lo/100*2, lo%100*2
	b[0], b[1], b[2], b[3] = twoDigits[a], twoDigits[a+1], twoDigits[c], twoDigits[c+1]
	b[4], b[5], b[6], b[7] = twoDigits[d], twoDigits[d+1], twoDigits[e], twoDigits[e+1]
	return n + 8
}

// putUpTo8 writes v < 1e8 without leading zeros.
func putUpTo8(b []byte, n int, v uint32) int {
	l := 1
	switch {
	case v >= 1e7:
		l = 8
	case v >= 1e6:
		l = 7
	case v >= 1e5:
		l = 6
	case v >= 1e4:
		l = 5
	case v >= 1e3:
		l = 4
	case v >= 1e2:
		l = 3
	case v >= 10:
		l = 2
	}
	i := n + l
	b = b[:i]
	for v >= 100 {
		q := v / 100
		r := (v - q*100) * 2
		i -= 2
		b[i], b[i+1] = twoDigits[r], twoDigits[r+1]
		v = q
	}
	if v >= 10 {
		b[i-2], b[i-1] = twoDigits[v*2], twoDigits[v*2+1]
	} else {
		b[i-1] = byte('0' + v)
	}
	return n + l
}
