package booking

// The booking body decoder: POST /v1/bookings is the hot path, so a
// hand-written decoder takes the JSON subset routers send and hands
// everything else to encoding/json, whose errors and quirks stay the
// reference. decode_test.go holds its differential tests and fuzz target
// against encoding/json.

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"sync"
	"unicode/utf8"
	"unsafe"

	"github.com/kvrouter/kv-hint-operator/internal/sidecar/jsonbody"
	"github.com/kvrouter/kv-hint-operator/pkg/dispatch"

	"github.com/kvrouter/kv-hint-operator/pkg/hints"
)

// decoded is a booking body as both decoders leave it: pkg/dispatch's
// Booking, which is what the dispatcher books, and which of the fields
// that a zero cannot stand for were present. One allocation holds it all,
// the committed copy included.
type decoded struct {
	dispatch.Booking
	// has says which of prompt_tokens, block_size, session and
	// committed_kv_copy the body held.
	has uint8
	// kvCopy is where Booking.KVCopy points when the body held a copy.
	kvCopy hints.CommittedCopy
}

// The bits of decoded.has.
const (
	hasPromptTokens = 1 << iota
	hasBlockSize
	hasSession
	hasCopy
)

// booking checks what only the body can tell (the required fields it
// left out, a zero block size, a session without its ID, a copy without
// hashes) and returns
// the booking; the dispatcher checks the rest (Booking's own rules).
func (d *decoded) booking() (*dispatch.Booking, error) {
	var missing []string
	if d.RequestID == "" {
		missing = append(missing, "request_id")
	}
	if d.Role == "" {
		missing = append(missing, "role")
	}
	if d.Worker == "" {
		missing = append(missing, "worker")
	}
	if d.has&hasPromptTokens == 0 {
		missing = append(missing, "prompt_tokens")
	}
	if d.has&hasBlockSize == 0 {
		missing = append(missing, "block_size")
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w: missing required field(s): %s", dispatch.ErrInvalidBooking, strings.Join(missing, ", "))
	}
	if d.BlockSize == 0 {
		// A zero says no more than a missing field does: a block holds at
		// least one token.
		return nil, fmt.Errorf("%w: block_size is 0; a KV block holds at least 1 token", dispatch.ErrInvalidBooking)
	}
	if d.PromptTokens > MaxPromptTokens {
		return nil, fmt.Errorf("%w: prompt_tokens is %d; it must be at most %d", dispatch.ErrInvalidBooking, d.PromptTokens, MaxPromptTokens)
	}
	if d.BlockSize > MaxBlockSize {
		return nil, fmt.Errorf("%w: block_size is %d; it must be at most %d", dispatch.ErrInvalidBooking, d.BlockSize, MaxBlockSize)
	}
	if d.BlockSize > 0 && d.PromptTokens > 0 {
		if n := (d.PromptTokens + d.BlockSize - 1) / d.BlockSize; n > MaxBookingBlocks {
			return nil, fmt.Errorf("%w: prompt_tokens %d at block_size %d is %d blocks, over the %d a booking may hold",
				dispatch.ErrInvalidBooking, d.PromptTokens, d.BlockSize, n, MaxBookingBlocks)
		}
	}
	if d.has&hasSession != 0 && d.Session.ID == "" {
		return nil, fmt.Errorf("%w: session.id is required when session is given", dispatch.ErrInvalidBooking)
	}
	if d.has&hasCopy != 0 && len(d.kvCopy.BlockHashes) == 0 {
		return nil, fmt.Errorf("%w: committed_kv_copy.block_hashes is empty; omit committed_kv_copy when nothing is copied", dispatch.ErrInvalidBooking)
	}
	return &d.Booking, nil
}

// Limits of a booking's numbers. They are kvhint preview's reading limits
// (internal/preview), so that every booking recorded is read back, and
// they keep the block arithmetic of every reader far inside an int.
const (
	// MaxPromptTokens bounds prompt_tokens (2^31-1).
	MaxPromptTokens = math.MaxInt32
	// MaxBlockSize bounds block_size: no block holds more than the
	// longest prompt.
	MaxBlockSize = math.MaxInt32
	// MaxBookingBlocks bounds a booking's blocks, ceil(prompt_tokens /
	// block_size): the most a kv-fetch may name, twice the block hashes
	// a committed copy holds in the default 1 MiB booking body.
	MaxBookingBlocks = 1 << 20
)

// bookingJSON is a booking body as encoding/json reads it, for the bodies
// the fast decoder leaves to it: the booking API's type (pkg/bookingapi,
// which pkg/dispatch books), and over it pointers that take the fields a
// zero cannot stand for, so that a missing field is told apart from a
// zero. A field of the outer struct hides the embedded one of the same
// JSON name, so each key decodes once. set turns it into a decoded.
type bookingJSON struct {
	dispatch.Booking
	PromptTokens *int           `json:"prompt_tokens"`
	BlockSize    *int           `json:"block_size"`
	Session      *hints.Session `json:"session"`
}

// set makes d what the fast decoder makes of a body encoding/json decoded
// into j. Block hashes decode straight into uint64 (encoding/json parses
// the literal as an unsigned integer), so no hash goes through a float64.
func (d *decoded) set(j *bookingJSON) {
	*d = decoded{Booking: dispatch.Booking{RequestID: j.RequestID, Role: j.Role, Worker: j.Worker}}
	if j.PromptTokens != nil {
		d.has |= hasPromptTokens
		d.PromptTokens = *j.PromptTokens
	}
	if j.BlockSize != nil {
		d.has |= hasBlockSize
		d.BlockSize = *j.BlockSize
	}
	if s := j.Session; s != nil {
		d.has |= hasSession
		d.Session = *s
	}
	if c := j.KVCopy; c != nil {
		d.has |= hasCopy
		d.kvCopy = *c
		d.KVCopy = &d.kvCopy
	}
}

// readBooking reads a booking body as jsonbody.Read does, with the same
// answers but for the 413's, which say what the limit holds and which flag
// sets it. It decodes the body with decodeBooking.
func readBooking(r io.Reader, declared, limit int, req *decoded) (int, error) {
	if declared > limit {
		return http.StatusRequestEntityTooLarge, bookingTooLarge(limit)
	}
	bp := jsonbody.GetBuf()
	defer jsonbody.PutBuf(bp)
	body, status, err := jsonbody.ReadBody(r, declared, limit, (*bp)[:0])
	*bp = body
	if status == http.StatusRequestEntityTooLarge {
		err = bookingTooLarge(limit)
	}
	if err != nil {
		return status, err
	}
	return decodeBooking(body, req)
}

// decodeBooking decodes a booking body with fastDecodeBooking when it can:
// a booking is the hot path and encoding/json's reflection costs more than
// the rest of the sidecar's work on it. Whatever the fast decoder does not
// accept with certainty goes to jsonbody.Decode, so every error message (and
// every quirk: case-insensitive keys, duplicate keys, nulls, escapes) is
// encoding/json's own. The strings and hashes of req never point into
// body.
func decodeBooking(body []byte, req *decoded) (int, error) {
	if fastDecodeBooking(body, req) {
		return 0, nil
	}
	var j bookingJSON
	status, err := jsonbody.Decode(body, &j)
	req.set(&j)
	return status, err
}

// bookingTooLarge is the 413 answer's error: the limit, what fits in it
// and the flag that sets it.
func bookingTooLarge(limit int) error {
	return fmt.Errorf("booking body is over the %d-byte limit, which holds a committed_kv_copy of about %d block hashes; "+
		"the sidecar's %s sets it", limit, limit/21, MaxBookingBytesFlag)
}

// fastDecodeBooking decodes body into req when it is a booking that
// encoding/json, as jsonbody.Decode runs it, would decode without error and
// into the same value; it returns false, with req in an unspecified state,
// for anything else, and the caller then runs encoding/json. It accepts:
// one object with only whitespace after it; exactly spelt keys, each at
// most once per object (encoding/json would match other spellings case-
// insensitively and let a repeated key win, so those go to it); strings
// without escapes or control characters, in valid UTF-8; integers in range
// without fraction or exponent; true and false; no null. The block hashes
// decode as unsigned 64-bit integers, so none goes through a float64.
func fastDecodeBooking(body []byte, req *decoded) bool {
	*req = decoded{}
	d := fastDecoder{buf: body}
	// The strings are copied into one allocation at the end; until then
	// they are offsets into body.
	var (
		strs                                  [6]span
		seen                                  uint16
		requestID, role, worker               = &strs[0], &strs[1], &strs[2]
		sessionID, sourceWorker, sourceEndpnt = &strs[3], &strs[4], &strs[5]
	)
	var hashes []uint64
	hashesSet := false
	const (
		seenRequestID = 1 << iota
		seenRole
		seenWorker
		seenPrompt
		seenBlockSize
		seenSession
		seenCopy
	)
	ok := d.object(func(key []byte) bool {
		var bit uint16
		var ok bool
		switch string(key) {
		case "request_id":
			bit, ok = seenRequestID, d.str(requestID)
		case "role":
			bit, ok = seenRole, d.str(role)
		case "worker":
			bit, ok = seenWorker, d.str(worker)
		case "prompt_tokens":
			bit, ok = seenPrompt, d.integer(&req.PromptTokens)
		case "block_size":
			bit, ok = seenBlockSize, d.integer(&req.BlockSize)
		case "session":
			bit = seenSession
			var inner uint8
			ok = d.object(func(key []byte) bool {
				var b uint8
				var ok bool
				switch string(key) {
				case "id":
					b, ok = 1, d.str(sessionID)
				case "turn":
					b, ok = 2, d.integer(&req.Session.Turn)
				case "final":
					b, ok = 4, d.boolean(&req.Session.Final)
				}
				if !ok || inner&b != 0 {
					return false
				}
				inner |= b
				return true
			})
		case "committed_kv_copy":
			bit = seenCopy
			var inner uint8
			ok = d.object(func(key []byte) bool {
				var b uint8
				var ok bool
				switch string(key) {
				case "source_worker":
					b, ok = 1, d.str(sourceWorker)
				case "source_endpoint":
					b, ok = 2, d.str(sourceEndpnt)
				case "block_hashes":
					b = 4
					hashes, ok = d.uints()
					hashesSet = ok
				case "source_rank":
					b, ok = 8, d.integer(&req.kvCopy.SourceRank)
				}
				if !ok || inner&b != 0 {
					return false
				}
				inner |= b
				return true
			})
		}
		if !ok || seen&bit != 0 {
			return false
		}
		seen |= bit
		return true
	})
	if !ok || !d.end() {
		return false
	}

	// One string holds every string field.
	n := 0
	for _, sp := range strs {
		n += sp.end - sp.start
	}
	var all string
	if n > 0 {
		b := make([]byte, 0, n)
		for _, sp := range strs {
			b = append(b, body[sp.start:sp.end]...)
		}
		all = unsafeString(b)
	}
	off := 0
	str := func(sp *span) string {
		l := sp.end - sp.start
		v := all[off : off+l]
		off += l
		return v
	}
	req.RequestID, req.Role, req.Worker = str(requestID), str(role), str(worker)
	if seen&seenPrompt != 0 {
		req.has |= hasPromptTokens
	}
	if seen&seenBlockSize != 0 {
		req.has |= hasBlockSize
	}
	req.Session.ID = str(sessionID)
	if seen&seenSession != 0 {
		req.has |= hasSession
	}
	req.kvCopy.SourceWorker, req.kvCopy.SourceEndpoint = str(sourceWorker), str(sourceEndpnt)
	if seen&seenCopy != 0 {
		if hashesSet {
			req.kvCopy.BlockHashes = hashes
		}
		req.has |= hasCopy
		req.KVCopy = &req.kvCopy
	}
	return true
}

// unsafeString returns b as a string without copying; b must never change.
func unsafeString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// span is a string's contents in the body, quotes excluded.
type span struct{ start, end int }

// fastDecoder scans the JSON subset fastDecodeBooking accepts. Every
// method returns false on anything outside it.
type fastDecoder struct {
	buf []byte
	i   int
}

func (d *fastDecoder) ws() {
	for d.i < len(d.buf) {
		switch d.buf[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

// end reports whether only whitespace is left.
func (d *fastDecoder) end() bool {
	d.ws()
	return d.i == len(d.buf)
}

// object reads {"key": value, ...}; member reads the value of each key.
func (d *fastDecoder) object(member func(key []byte) bool) bool {
	d.ws()
	if d.i >= len(d.buf) || d.buf[d.i] != '{' {
		return false
	}
	d.i++
	d.ws()
	if d.i < len(d.buf) && d.buf[d.i] == '}' {
		d.i++
		return true
	}
	for {
		var k span
		if !d.str(&k) {
			return false
		}
		d.ws()
		if d.i >= len(d.buf) || d.buf[d.i] != ':' {
			return false
		}
		d.i++
		d.ws()
		if !member(d.buf[k.start:k.end]) {
			return false
		}
		d.ws()
		if d.i >= len(d.buf) {
			return false
		}
		switch d.buf[d.i] {
		case ',':
			d.i++
			d.ws()
		case '}':
			d.i++
			return true
		default:
			return false
		}
	}
}

// str reads a string without escapes or control characters, in valid
// UTF-8: exactly the strings encoding/json keeps byte for byte.
func (d *fastDecoder) str(sp *span) bool {
	if d.i >= len(d.buf) || d.buf[d.i] != '"' {
		return false
	}
	start := d.i + 1
	ascii := true
	for j := start; j < len(d.buf); j++ {
		c := d.buf[j]
		switch {
		case c == '"':
			if !ascii && !utf8.Valid(d.buf[start:j]) {
				return false
			}
			*sp = span{start, j}
			d.i = j + 1
			return true
		case c == '\\' || c < 0x20:
			return false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return false
}

// delim reports whether the number or literal that ended before d.i is
// followed by what may follow a value here.
func (d *fastDecoder) delim() bool {
	if d.i == len(d.buf) {
		return true
	}
	switch d.buf[d.i] {
	case ' ', '\t', '\n', '\r', ',', '}', ']':
		return true
	}
	return false
}

// integer reads an int: an optional minus, then 0 or digits without a
// leading zero, in range, with no fraction or exponent.
func (d *fastDecoder) integer(v *int) bool {
	neg := false
	if d.i < len(d.buf) && d.buf[d.i] == '-' {
		neg = true
		d.i++
	}
	u, ok := d.digits()
	if !ok {
		return false
	}
	switch {
	case !neg && u <= math.MaxInt:
		*v = int(u)
	case neg && u <= -math.MinInt:
		*v = int(-u)
	default:
		return false
	}
	return true
}

// digits reads an unsigned integer literal: 0, or digits not starting with
// 0, that fits in 64 bits and ends at a delimiter. Block hashes are most of
// a booking and most have 19 or 20 digits, so it takes eight at a time.
func (d *fastDecoder) digits() (uint64, bool) {
	start := d.i
	buf := d.buf
	var u uint64
	i := d.i
	// Up to two blocks of eight digits (u stays under 10^16).
	for n := 0; n < 2 && i+8 <= len(buf); n++ {
		v := binary.LittleEndian.Uint64(buf[i:])
		if !eightDigits(v) {
			break
		}
		u = u*100000000 + parseEightDigits(v)
		i += 8
	}
	// Then one at a time up to 19 digits, which always fit in 64 bits.
	for end := min(len(buf), start+19); i < end; i++ {
		c := buf[i] - '0'
		if c > 9 {
			break
		}
		u = u*10 + uint64(c)
	}
	if i-start == 19 && i < len(buf) {
		// A 20th digit fits if u*10+c <= 18446744073709551615; a 21st
		// never does.
		if c := buf[i] - '0'; c <= 9 {
			const maxDiv10, maxMod10 = math.MaxUint64 / 10, math.MaxUint64 % 10
			if u > maxDiv10 || (u == maxDiv10 && uint64(c) > maxMod10) {
				return 0, false
			}
			u = u*10 + uint64(c)
			i++
			if i < len(buf) && buf[i]-'0' <= 9 {
				return 0, false
			}
		}
	}
	d.i = i
	n := i - start
	if n == 0 || (n > 1 && buf[start] == '0') {
		return 0, false
	}
	return u, d.delim()
}

// eightDigits reports whether the eight bytes of v (little-endian, first
// byte lowest) are all ASCII digits: each has the high nibble 3, and still
// has it after adding 6 (which carries 0x3a..0x3f into 0x4_).
func eightDigits(v uint64) bool {
	const hi, three, six = 0xf0f0f0f0f0f0f0f0, 0x3030303030303030, 0x0606060606060606
	return v&hi == three && (v+six)&hi == three
}

// parseEightDigits returns the value of eight ASCII digits loaded
// little-endian, the first digit the most significant: pairs, then
// quadruples, then the whole, by multiplication.
func parseEightDigits(v uint64) uint64 {
	v -= 0x3030303030303030
	v = v*10 + v>>8 // each even byte: two digits
	const mask = 0x000000ff000000ff
	return ((v&mask)*(100+1000000<<32) + (v>>16&mask)*(1+10000<<32)) >> 32
}

func (d *fastDecoder) boolean(v *bool) bool {
	rest := d.buf[d.i:]
	switch {
	case bytes.HasPrefix(rest, []byte("true")):
		*v = true
		d.i += 4
	case bytes.HasPrefix(rest, []byte("false")):
		*v = false
		d.i += 5
	default:
		return false
	}
	return d.delim()
}

// hashBufs holds the scratch lists of block hashes.
var hashBufs = sync.Pool{New: func() any { b := make([]uint64, 0, 512); return &b }}

// uints reads a list of unsigned 64-bit integers into a new slice of
// exactly their number; [] gives an empty, non-nil slice, as encoding/json
// does.
func (d *fastDecoder) uints() ([]uint64, bool) {
	if d.i >= len(d.buf) || d.buf[d.i] != '[' {
		return nil, false
	}
	d.i++
	d.ws()
	if d.i < len(d.buf) && d.buf[d.i] == ']' {
		d.i++
		return []uint64{}, true
	}
	bp := hashBufs.Get().(*[]uint64)
	defer func() {
		if cap(*bp) <= 1<<16 {
			hashBufs.Put(bp)
		}
	}()
	scratch := (*bp)[:0]
	for {
		u, ok := d.digits()
		if !ok {
			*bp = scratch
			return nil, false
		}
		scratch = append(scratch, u)
		d.ws()
		if d.i >= len(d.buf) {
			*bp = scratch
			return nil, false
		}
		switch d.buf[d.i] {
		case ',':
			d.i++
			d.ws()
		case ']':
			d.i++
			*bp = scratch
			return append(make([]uint64, 0, len(scratch)), scratch...), true
		default:
			*bp = scratch
			return nil, false
		}
	}
}
