package booking

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kvrouter/kv-hint-operator/internal/preview"
	"github.com/kvrouter/kv-hint-operator/internal/sidecar/jsonbody"
	"github.com/kvrouter/kv-hint-operator/pkg/dispatch"
)

// decodeSeeds are booking bodies the fast decoder must agree with
// encoding/json on: the usual ones, which it decodes itself, and the edge
// cases it hands over to encoding/json.
var decodeSeeds = []string{
	// What routers and the load generator send.
	`{"request_id":"req-1","role":"prefill","worker":"p0","prompt_tokens":4096,"block_size":16,"session":{"id":"sess-1","turn":2,"final":false},"committed_kv_copy":{"source_worker":"p1","source_endpoint":"tcp://p1:23280","block_hashes":[11,22,18446744073709551615]}}`,
	`{"request_id":"req-2","role":"decode","worker":"d0","prompt_tokens":0,"block_size":0,"session":{"id":"s","turn":1,"final":true}}`,
	`{"request_id":"r","role":"decode","worker":"w","prompt_tokens":1,"block_size":1}`,
	`{"request_id":"r","role":"prefill","worker":"p0","prompt_tokens":1,"block_size":1,"committed_kv_copy":{"source_worker":"p1","source_rank":3,"block_hashes":[7]}}`,
	" \t\r\n{ \"request_id\" : \"r\" ,\n\"role\":\"decode\" , \"worker\":\"w\",\"prompt_tokens\":1 ,\"block_size\" :1 ,\"committed_kv_copy\" : { \"block_hashes\" : [ 1 , 2 ] } } \n\t",
	// Hashes at and past the edges of uint64.
	`{"committed_kv_copy":{"block_hashes":[0,1,9007199254740993,18446744073709551614,18446744073709551615]}}`,
	`{"committed_kv_copy":{"block_hashes":[18446744073709551616]}}`,
	`{"committed_kv_copy":{"block_hashes":[99999999999999999999]}}`,
	`{"committed_kv_copy":{"block_hashes":[184467440737095516150]}}`,
	`{"committed_kv_copy":{"block_hashes":[-1]}}`,
	`{"committed_kv_copy":{"block_hashes":[-0]}}`,
	`{"committed_kv_copy":{"block_hashes":[1.5]}}`,
	`{"committed_kv_copy":{"block_hashes":[1e3]}}`,
	`{"committed_kv_copy":{"block_hashes":[1E+3]}}`,
	`{"committed_kv_copy":{"block_hashes":[01]}}`,
	`{"committed_kv_copy":{"block_hashes":["1"]}}`,
	`{"committed_kv_copy":{"block_hashes":[1,]}}`,
	`{"committed_kv_copy":{"block_hashes":[,1]}}`,
	`{"committed_kv_copy":{"block_hashes":[]}}`,
	`{"committed_kv_copy":{"block_hashes":null}}`,
	`{"committed_kv_copy":{"block_hashes":[null]}}`,
	`{"committed_kv_copy":{}}`,
	`{"committed_kv_copy":null}`,
	`{"committed_kv_copy":{"block_hashes":[1]},"committed_kv_copy":{"source_worker":"b"}}`,
	`{"committed_kv_copy":{"block_hashes":[1],"block_hashes":[2,3]}}`,
	`{"committed_kv_copy":{"block_hashes":{"a":1}}}`,
	`{"committed_kv_copy":[1]}`,
	`{"committed_kv_copy":{"source_rank":-1,"block_hashes":[1]}}`,
	`{"committed_kv_copy":{"source_rank":1.5}}`,
	`{"committed_kv_copy":{"source_rank":"1"}}`,
	`{"committed_kv_copy":{"source_rank":null}}`,
	`{"committed_kv_copy":{"source_rank":1,"source_rank":2}}`,
	`{"committed_kv_copy":{"Source_Rank":1}}`,
	// Counts.
	`{"prompt_tokens":9223372036854775807,"block_size":-9223372036854775808}`,
	`{"prompt_tokens":9223372036854775808}`,
	`{"block_size":-9223372036854775809}`,
	`{"prompt_tokens":-0}`,
	`{"prompt_tokens":-}`,
	`{"prompt_tokens":1.0}`,
	`{"prompt_tokens":1e2}`,
	`{"prompt_tokens":"12"}`,
	`{"prompt_tokens":null}`,
	`{"prompt_tokens":true}`,
	`{"prompt_tokens":1,"prompt_tokens":2}`,
	`{"session":{"id":"s","turn":-3,"final":true}}`,
	`{"session":{"id":"s","final":tru}}`,
	`{"session":{"id":"s","final":truex}}`,
	`{"session":{"id":"s","final":1}}`,
	`{"session":{"id":"a","turn":2},"session":{"id":"b"}}`,
	`{"session":{"id":"a","id":"b"}}`,
	`{"session":{}}`,
	`{"session":null}`,
	`{"session":{"id":"s","extra":1}}`,
	// Keys: spelling, case, unknown, duplicate.
	`{"Request_ID":"r","ROLE":"decode"}`,
	`{"request_id":"a","request_id":"b"}`,
	`{"request_id":"a","Request_Id":"b"}`,
	`{"promt":1}`,
	`{"request_id":"r","":1}`,
	`{"request\u005fid":"r"}`,
	// Strings: escapes, Unicode, invalid UTF-8, control characters.
	`{"request_id":"quote\"and\\newline\n"}`,
	`{"request_id":"\u00e9\ud83d\ude00"}`,
	`{"request_id":"\ud800"}`,
	"{\"request_id\":\"h\u00e9llo \U0001F600\"}",
	"{\"request_id\":\"bad \xff utf8\"}",
	"{\"request_id\":\"surrogate \xed\xa0\x80\"}",
	"{\"request_id\":\"tab\there\"}",
	"{\"request_id\":\"del\x7f\"}",
	`{"request_id":null}`,
	`{"request_id":1}`,
	`{"request_id":"unterminated}`,
	// Shapes around the object.
	``,
	` `,
	`{}`,
	`[1,2]`,
	`"s"`,
	`null`,
	`{`,
	`{"request_id":"r",}`,
	`{,"request_id":"r"}`,
	`{"request_id" "r"}`,
	`{"request_id":"r"}{}`,
	`{"request_id":"r"}}`,
	`{"request_id":"r"}]`,
	`{"request_id":"r"} x`,
	`{"request_id":"r"}` + "\x00",
	`{"request_id":"r"`,
}

// refDecode is the reference: encoding/json as jsonbody.Decode runs it.
func refDecode(body []byte) (decoded, int, string) {
	var j bookingJSON
	status, err := jsonbody.Decode(body, &j)
	var req decoded
	req.set(&j)
	if err != nil {
		return req, status, err.Error()
	}
	return req, 0, ""
}

// cmpDecoded compares decoded values field by field, the presence bits
// included.
var cmpDecoded = cmp.AllowUnexported(decoded{})

// checkFastDecode fails when the fast decoder accepts a body encoding/json
// refuses or decodes differently; it reports whether the fast path took it.
func checkFastDecode(t *testing.T, body []byte) bool {
	t.Helper()
	var got decoded
	if !fastDecodeBooking(body, &got) {
		return false
	}
	want, _, err := refDecode(body)
	if err != "" {
		t.Fatalf("fast decoder accepted %q, which encoding/json refuses: %s", body, err)
	}
	if diff := cmp.Diff(want, got, cmpDecoded); diff != "" {
		t.Fatalf("fast decoder on %q (-encoding/json +fast):\n%s", body, diff)
	}
	return true
}

// errString is err's text, or "" for nil.
func errString(err error) string {
	if err != nil {
		return err.Error()
	}
	return ""
}

// checkDecodeBooking: the booking handler's read and decode (readBooking)
// answers every body as jsonbody.Read, the worker handler's, does: status,
// error message and value. declared is the body's Content-Length, -1 for
// one sent without (chunked).
func checkDecodeBooking(t *testing.T, body []byte, declared int) {
	t.Helper()
	var got, want decoded
	var wantJSON bookingJSON
	gotStatus, gotErr := readBooking(bytes.NewReader(body), declared, dispatch.DefaultMaxBookingBytes, &got)
	wantStatus, wantErr := jsonbody.Read(bytes.NewReader(body), declared, dispatch.DefaultMaxBookingBytes, &wantJSON)
	want.set(&wantJSON)
	// A body over the limit gets the booking API's own message, which
	// names the flag that sets the limit.
	if gotStatus != wantStatus || errString(gotErr) != errString(wantErr) && gotStatus != http.StatusRequestEntityTooLarge {
		t.Fatalf("readBooking(%q) = %d %q, jsonbody.Read %d %q", body, gotStatus, gotErr, wantStatus, wantErr)
	}
	if wantErr == nil {
		if diff := cmp.Diff(want, got, cmpDecoded); diff != "" {
			t.Fatalf("readBooking(%q) (-jsonbody.Read +readBooking):\n%s", body, diff)
		}
	}
}

// TestFastDecodeBooking holds the fast decoder to encoding/json on the
// seeds and on every single-byte deletion, duplication and substitution
// of them, and checks that it does take the usual bookings itself.
func TestFastDecodeBooking(t *testing.T) {
	for i, s := range decodeSeeds[:6] {
		if !checkFastDecode(t, []byte(s)) {
			t.Errorf("seed %d went to encoding/json; the fast path should take it: %s", i, s)
		}
	}
	subst := []byte(` "\,:{}[]-+.0159eEtfnu` + "\t\x00\x7f\xc3\xff")
	fast, n := 0, 0
	for _, s := range decodeSeeds {
		b := []byte(s)
		try := func(m []byte) {
			n++
			if checkFastDecode(t, m) {
				fast++
			}
			checkDecodeBooking(t, m, len(m))
		}
		try(b)
		for i := range b {
			try(append(append([]byte{}, b[:i]...), b[i+1:]...))
			try(append(append([]byte{}, b[:i+1]...), b[i:]...))
			for _, c := range subst {
				if c != b[i] {
					m := append([]byte{}, b...)
					m[i] = c
					try(m)
				}
			}
		}
	}
	t.Logf("%d bodies, %d decoded by the fast path", n, fast)
}

// TestDecodeBookingOversize: a body over the limit gets jsonbody.Read's 413,
// with the booking API's message, whichever path would have decoded it:
// refused up front when its Content-Length says so, and after one byte
// past the limit when it is sent without one, or arrives a byte at a time.
func TestDecodeBookingOversize(t *testing.T) {
	body := []byte(`{"committed_kv_copy":{"block_hashes":[` + strings.Repeat("1,", dispatch.DefaultMaxBookingBytes/2) + `1]}}`)
	for _, tc := range []struct {
		name     string
		r        func() io.Reader
		declared int
	}{
		{"declared", func() io.Reader { return bytes.NewReader(body) }, len(body)},
		{"chunked", func() io.Reader { return bytes.NewReader(body) }, -1},
		{"trickled", func() io.Reader { return iotest.OneByteReader(bytes.NewReader(body)) }, -1},
		{"lying", func() io.Reader { return bytes.NewReader(body) }, 100},
	} {
		var req decoded
		status, err := readBooking(tc.r(), tc.declared, dispatch.DefaultMaxBookingBytes, &req)
		if status != http.StatusRequestEntityTooLarge || !strings.Contains(errString(err), "over the 1048576-byte limit") ||
			!strings.Contains(errString(err), "--max-booking-bytes") {
			t.Errorf("%s oversize: %d %v", tc.name, status, err)
		}
	}
	checkDecodeBooking(t, body, len(body))
	checkDecodeBooking(t, body, -1)
	// Exactly at the limit is fine.
	at := []byte(`{"request_id":"` + strings.Repeat("r", dispatch.DefaultMaxBookingBytes-len(`{"request_id":""}`)) + `"}`)
	checkDecodeBooking(t, at, len(at))
	checkDecodeBooking(t, at, -1)
	var req decoded
	if status, err := readBooking(iotest.OneByteReader(bytes.NewReader(at)), -1, dispatch.DefaultMaxBookingBytes, &req); err != nil {
		t.Errorf("a body of exactly the limit, a byte at a time: %d %v", status, err)
	}
	if !checkFastDecode(t, at) {
		t.Error("a body of exactly the limit went to encoding/json")
	}
	// A read error is a 400 that says so.
	if status, err := readBooking(iotest.ErrReader(errors.New("connection reset")), -1, dispatch.DefaultMaxBookingBytes, &req); status != http.StatusBadRequest ||
		!strings.Contains(errString(err), "reading the body: connection reset") {
		t.Errorf("read error: %d %v", status, err)
	}
}

// FuzzDecodeBooking: whatever the body, decodeBooking answers as jsonbody.Decode
// does, and the fast decoder never accepts what encoding/json refuses or
// decodes it differently.
func FuzzDecodeBooking(f *testing.F) {
	for _, s := range decodeSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		checkFastDecode(t, body)
		checkDecodeBooking(t, body, len(body))
	})
}

// BenchmarkDecodeBooking compares the fast decoder with encoding/json on
// a booking with 256 hashes.
func BenchmarkDecodeBooking(b *testing.B) {
	var sb strings.Builder
	sb.WriteString(`{"request_id":"req-123456","role":"prefill","worker":"prefill-7","prompt_tokens":4096,"block_size":16,"session":{"id":"sess-42","turn":3,"final":false},"committed_kv_copy":{"source_worker":"prefill-3","source_endpoint":"tcp://prefill-3:23280","block_hashes":[`)
	for i := range 256 {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprint(&sb, uint64(i)*0x9e3779b97f4a7c15)
	}
	sb.WriteString(`]}}`)
	body := []byte(sb.String())
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			var req decoded
			if !fastDecodeBooking(body, &req) {
				b.Fatal("not decoded")
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			var req bookingJSON
			if _, err := jsonbody.Decode(body, &req); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestParseEightDigits holds the eight-at-a-time digit parser to strconv.
func TestParseEightDigits(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 200000 {
		var b [8]byte
		for j := range b {
			b[j] = '0' + byte(rng.IntN(10))
			if i%7 == 0 && rng.IntN(8) == 0 {
				b[j] = byte(rng.IntN(256)) // sometimes not a digit
			}
		}
		v := binary.LittleEndian.Uint64(b[:])
		want, err := strconv.ParseUint(string(b[:]), 10, 64)
		isDigits := err == nil && !strings.ContainsAny(string(b[:]), "+-")
		if eightDigits(v) != isDigits {
			t.Fatalf("eightDigits(%q) = %v", b, !isDigits)
		}
		if isDigits && parseEightDigits(v) != want {
			t.Fatalf("parseEightDigits(%q) = %d, want %d", b, parseEightDigits(v), want)
		}
	}
	// Every hash length from 1 to 21 digits, at and around the uint64 limit.
	for _, s := range []string{"0", "7", "10", "12345678", "123456789", "1234567890123456", "12345678901234567",
		"9999999999999999999", "10000000000000000000", "18446744073709551615", "18446744073709551616",
		"18446744073709551619", "18446744073709551620", "99999999999999999999", "100000000000000000000"} {
		body := []byte(`{"committed_kv_copy":{"block_hashes":[` + s + `]}}`)
		fits := len(s) < 20 || (len(s) == 20 && s <= "18446744073709551615")
		if checkFastDecode(t, body) != fits {
			t.Errorf("hash %s: fast path took it: %v, want %v", s, !fits, fits)
		}
	}
}

// longBookingBody is a booking body with a copy of n random 64-bit hashes,
// as routers send it.
func longBookingBody(n int) []byte {
	rng := rand.New(rand.NewPCG(uint64(n), 11))
	b := []byte(`{"request_id":"req-7f3a9c2e-5b1d-4e8a-9c6f-0d2b3a4e5f60","role":"prefill","worker":"prefill-7","prompt_tokens":` +
		strconv.Itoa(16*n) + `,"block_size":16,"session":{"id":"sess-42","turn":3,"final":false},` +
		`"committed_kv_copy":{"source_worker":"prefill-3","source_endpoint":"tcp://10.0.0.7:23280","block_hashes":[`)
	for i := range n {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendUint(b, rng.Uint64(), 10)
	}
	return append(b, "]}}"...)
}

// parseFloor is the irreducible part of decoding a booking body: finding
// the hash list and parsing each hash with strconv.ParseUint into a slice
// allocated once.
func parseFloor(body []byte, dst []uint64) ([]uint64, error) {
	i := bytes.Index(body, []byte(`"block_hashes":[`)) + len(`"block_hashes":[`)
	dst = dst[:0]
	for {
		j := i
		for body[j] != ',' && body[j] != ']' {
			j++
		}
		v, err := strconv.ParseUint(unsafeString(body[i:j]), 10, 64)
		if err != nil {
			return nil, err
		}
		dst = append(dst, v)
		if body[j] == ']' {
			return dst, nil
		}
		i = j + 1
	}
}

// BenchmarkDecodeLong is the booking body decode (the hand-written
// decoder, as the booking API runs it) at 64 to 32,768 hashes, each next to
// its floor, strconv.ParseUint over the same hashes, in turn within every
// iteration: book-ns/op, floor-ns/op and decode/floor are the figures.
func BenchmarkDecodeLong(b *testing.B) {
	for _, n := range []int{64, 1024, 8192, 32768} {
		body := longBookingBody(n)
		dst := make([]uint64, 0, n)
		b.Run(fmt.Sprintf("blocks=%d", n), func(b *testing.B) {
			var dec, floor time.Duration
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				t0 := time.Now()
				var req decoded
				if !fastDecodeBooking(body, &req) || len(req.KVCopy.BlockHashes) != n {
					b.Fatal("not decoded")
				}
				t1 := time.Now()
				var err error
				if dst, err = parseFloor(body, dst); err != nil || len(dst) != n {
					b.Fatal(err)
				}
				floor += time.Since(t1)
				dec += t1.Sub(t0)
			}
			b.ReportMetric(float64(dec.Nanoseconds())/float64(b.N), "decode-ns/op")
			b.ReportMetric(float64(floor.Nanoseconds())/float64(b.N), "floor-ns/op")
			b.ReportMetric(float64(dec)/float64(floor), "decode/floor")
		})
	}
}

// The booking limits are preview's reading limits: what the sidecar
// records, preview reads.
func TestBookingLimitsArePreviewReadingLimits(t *testing.T) {
	if MaxPromptTokens != preview.MaxInputTokens || MaxBlockSize != preview.MaxBlockSize || MaxBookingBlocks != preview.MaxBlocksPerRow {
		t.Errorf("booking limits %d tokens, block size %d, %d blocks; preview reads %d, %d, %d",
			MaxPromptTokens, MaxBlockSize, MaxBookingBlocks, preview.MaxInputTokens, preview.MaxBlockSize, preview.MaxBlocksPerRow)
	}
}

// TestBookingFieldRules: a zero block_size is refused as a missing one
// is, and a session's turn 0 as the dispatcher refuses it in process.
// Before, block_size 0 was accepted while a missing one was refused.
func TestBookingFieldRules(t *testing.T) {
	for _, tc := range []struct {
		body, want string
	}{
		{`{"request_id":"r","role":"decode","worker":"w","prompt_tokens":1}`, "missing required field(s): block_size"},
		{`{"request_id":"r","role":"decode","worker":"w","prompt_tokens":1,"block_size":0}`, "block_size is 0; a KV block holds at least 1 token"},
		{`{"request_id":"r","role":"decode","worker":"w","prompt_tokens":1,"block_size":16,"committed_kv_copy":{"block_hashes":[]}}`, "block_hashes is empty"},
		// What the recorder would write and kvhint preview refuse (or
		// panic on) is refused here: the two share their limits.
		{`{"request_id":"r","role":"decode","worker":"w","prompt_tokens":3000000000,"block_size":16}`, "prompt_tokens is 3000000000; it must be at most 2147483647"},
		{`{"request_id":"r","role":"decode","worker":"w","prompt_tokens":10,"block_size":9223372036854775807}`, "block_size is 9223372036854775807; it must be at most 2147483647"},
		{`{"request_id":"r","role":"decode","worker":"w","prompt_tokens":2147483647,"block_size":1}`, "2147483647 blocks, over the 1048576"},
	} {
		// Both decoders: the fast one, and encoding/json's that it falls
		// back to.
		var fast decoded
		if !fastDecodeBooking([]byte(tc.body), &fast) {
			t.Fatalf("%s: the fast decoder did not take it", tc.body)
		}
		var j bookingJSON
		if err := json.Unmarshal([]byte(tc.body), &j); err != nil {
			t.Fatal(err)
		}
		var slow decoded
		slow.set(&j)
		for name, d := range map[string]*decoded{"fast": &fast, "encoding/json": &slow} {
			if _, err := d.booking(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s decoder, %s: %v; want %q", name, tc.body, err, tc.want)
			}
		}
	}
}
