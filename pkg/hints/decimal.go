package hints

import (
	"encoding/binary"
	"math/bits"
	"slices"
)

// Block hashes are random 64-bit values, so most print as 19 or 20 digits,
// and a kv.fetch carries dozens of them: their decimal formatting is most
// of a booking's cost. appendUint64 splits a value into 8-digit chunks that
// fit in 32 bits and turns each into its eight digits at once (digits8),
// where strconv makes two digits per 64-bit division step.

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
	n := len(dst)
	for _, h := range v {
		if h < 1e16 {
			n = putUint64(b, n, h) + 1
		} else {
			// 17 to 20 digits, all but one in 5,000 random hashes: written
			// inline, the leading 1-4 digits first.
			top := h / 1e16
			rest := h - top*1e16
			mid := rest / 1e8
			n = putUpTo4(b, n, uint32(top))
			binary.LittleEndian.PutUint64(b[n:], digits8(uint32(mid))|asciiZeros)
			binary.LittleEndian.PutUint64(b[n+8:], digits8(uint32(rest-mid*1e8))|asciiZeros)
			n += 17
		}
		b[n-1] = ','
	}
	return dst[:n-1]
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
	n = putUpTo4(b, n, uint32(v/1e16))
	n = put8(b, n, uint32(rest/1e8))
	return put8(b, n, uint32(rest%1e8))
}

// put8 writes v < 1e8 as exactly eight digits, leading zeros included,
// with one 8-byte store.
func put8(b []byte, n int, v uint32) int {
	binary.LittleEndian.PutUint64(b[n:], digits8(v)|asciiZeros)
	return n + 8
}

// putUpTo8 writes v < 1e8 without leading zeros. It stores 8 bytes at
// b[n:], of which the digits are the first; the caller's room for 20
// digits covers the rest, which later writes overwrite or leave past the
// slice's length.
func putUpTo8(b []byte, n int, v uint32) int {
	d := digits8(v)
	// The most significant digit is the lowest byte: leading zeros are
	// the zero bytes at the bottom. 0 keeps its one digit.
	zeros := min(bits.TrailingZeros64(d)/8, 7)
	binary.LittleEndian.PutUint64(b[n:], (d|asciiZeros)>>(8*zeros))
	return n + 8 - zeros
}

// putUpTo4 writes 0 < v < 1e4 without leading zeros, as putUpTo8 does with
// a 4-byte store: the leading digits of a uint64 of 17 to 20 digits.
func putUpTo4(b []byte, n int, v uint32) int {
	hi := v / 100
	x := hi | (v-hi*100)<<16
	q := (x * 103 >> 10) & 0x000f000f
	d := q | (x-q*10)<<8
	zeros := bits.TrailingZeros32(d) / 8
	binary.LittleEndian.PutUint32(b[n:], (d|asciiZeros&0xffffffff)>>(8*zeros))
	return n + 4 - zeros
}

// asciiZeros turns eight digit values, one per byte, into their ASCII.
const asciiZeros = 0x3030303030303030

// digits8 returns the eight decimal digits of v < 1e8 as the bytes of a
// little-endian word, most significant digit in the lowest byte, each
// digit's value (0-9) in its byte. It divides in SIMD-within-a-register
// steps: v into two 4-digit halves in 32-bit lanes, each into 2-digit
// pairs in 16-bit lanes, each into digits in 8-bit lanes, a division by a
// constant in every lane at once as a multiply and a shift. The constants
// are exact over each step's range (0-9999 by 100: 10486/2^20; 0-99 by
// 10: 103/2^10), and the lanes never carry into each other: TestDigits8
// checks every value of each half.
func digits8(v uint32) uint64 {
	hi := v / 10000
	x := uint64(hi) | uint64(v-hi*10000)<<32
	q := (x * 10486 >> 20) & 0x0000007f0000007f
	x = q | (x-q*100)<<16
	q = (x * 103 >> 10) & 0x000f000f000f000f
	return q | (x-q*10)<<8
}
