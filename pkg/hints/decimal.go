package hints

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

// appendUint64 appends v in decimal, as strconv.AppendUint(dst, v, 10) does.
func appendUint64(dst []byte, v uint64) []byte {
	if v < 1e8 {
		return appendUpTo8(dst, uint32(v))
	}
	if v < 1e16 {
		return append8(appendUpTo8(dst, uint32(v/1e8)), uint32(v%1e8))
	}
	rest := v % 1e16
	return append8(append8(appendUpTo8(dst, uint32(v/1e16)), uint32(rest/1e8)), uint32(rest%1e8))
}

// append8 appends v < 1e8 as exactly eight digits, leading zeros included.
func append8(dst []byte, v uint32) []byte {
	hi, lo := v/10000, v%10000
	a, b := hi/100*2, hi%100*2
	c, d := lo/100*2, lo%100*2
	return append(dst,
		twoDigits[a], twoDigits[a+1], twoDigits[b], twoDigits[b+1],
		twoDigits[c], twoDigits[c+1], twoDigits[d], twoDigits[d+1])
}

// appendUpTo8 appends v < 1e8 without leading zeros.
func appendUpTo8(dst []byte, v uint32) []byte {
	var buf [8]byte
	i := len(buf)
	for v >= 100 {
		q := v / 100
		r := (v - q*100) * 2
		i -= 2
		buf[i], buf[i+1] = twoDigits[r], twoDigits[r+1]
		v = q
	}
	if v >= 10 {
		i -= 2
		buf[i], buf[i+1] = twoDigits[v*2], twoDigits[v*2+1]
	} else {
		i--
		buf[i] = byte('0' + v)
	}
	return append(dst, buf[i:]...)
}
