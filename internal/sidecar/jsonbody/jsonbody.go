// Package jsonbody reads and decodes the sidecar's JSON request bodies
// strictly: at most a limit of bytes (413 past it), read within the
// connection's read timeout (408), one object without unknown fields (400),
// with errors in the body's terms rather than encoding/json's. The booking
// API, the worker routes and the workers file use it.
//
// It imports only the standard library.
package jsonbody

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"sync"
)

// Read reads a body of at most limit bytes from r, declared bytes long
// (-1 when not known), and decodes it with Decode. A body over the
// limit is answered 413.
func Read(r io.Reader, declared, limit int, dst any) (int, error) {
	if declared > limit {
		// Refused up front, before a byte of the body is read.
		return http.StatusRequestEntityTooLarge, OverLimit(limit)
	}
	bp := GetBuf()
	defer PutBuf(bp)
	body, status, err := ReadBody(r, declared, limit, (*bp)[:0])
	*bp = body
	if err != nil {
		return status, err
	}
	return Decode(body, dst)
}

// Decode decodes one JSON object strictly: no unknown fields (a
// misspelt field would otherwise be silently zero), nothing after it. The
// error says what is wrong in the body's terms; the status is 400.
func Decode(body []byte, dst any) (int, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return http.StatusBadRequest, DescribeError(err)
	}
	if dec.More() {
		return http.StatusBadRequest, errors.New("body has data after the JSON object")
	}
	return 0, nil
}

// OverLimit is the error of a body over limit bytes.
func OverLimit(limit int) error { return fmt.Errorf("body is over the %d-byte limit", limit) }

// bodyBufs holds request body buffers; ones grown past maxPooledBody are
// dropped rather than kept.
var bodyBufs = sync.Pool{New: func() any { b := make([]byte, 0, 8<<10); return &b }}

const maxPooledBody = 64 << 10

// maxPreallocBody is the largest declared Content-Length ReadBody
// allocates before the body arrives.
const maxPreallocBody = 16 << 10

// GetBuf takes a body buffer from the pool; PutBuf gives it back.
func GetBuf() *[]byte { return bodyBufs.Get().(*[]byte) }

// PutBuf gives a body buffer back to the pool, unless it grew too large.
func PutBuf(bp *[]byte) {
	if cap(*bp) <= maxPooledBody {
		*bp = (*bp)[:0]
		bodyBufs.Put(bp)
	}
}

// ReadBody appends the body r holds to buf, declared bytes long (-1 when
// not known), and returns it; a body over limit bytes is a 413, a read
// error a 400. It reads at most one byte past the limit.
func ReadBody(r io.Reader, declared, limit int, buf []byte) ([]byte, int, error) {
	if declared > 0 && declared < maxPreallocBody && cap(buf)-len(buf) < declared+1 {
		// Room for the body and the read that sees its end. Only a small
		// declared length is trusted: a client that declares a megabyte
		// and sends a byte must cost a byte, so larger bodies grow the
		// buffer with what arrives.
		buf = append(make([]byte, 0, len(buf)+declared+1), buf...)
	}
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := r.Read(buf[len(buf):min(cap(buf), limit+1)])
		buf = buf[:len(buf)+n]
		switch {
		case len(buf) > limit:
			return buf, http.StatusRequestEntityTooLarge, OverLimit(limit)
		case err == io.EOF:
			return buf, 0, nil
		case err == nil:
			// More to read. (isTimeout would allocate for a nil error.)
		case isTimeout(err):
			// The read timeout passed with the body still arriving: the
			// client was too slow, the booking was not wrong.
			return buf, http.StatusRequestTimeout, fmt.Errorf("reading the body: the body did not arrive within the read timeout: %w", err)
		case err != nil:
			return buf, http.StatusBadRequest, fmt.Errorf("reading the body: %w", err)
		}
	}
}

func DescribeError(err error) error {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		if te.Field == "" {
			return fmt.Errorf("body is a JSON %s; send a JSON object", te.Value)
		}
		return fmt.Errorf("%s: got %s, want %s", te.Field, te.Value, KindOf(te.Type))
	case errors.As(err, &se):
		return fmt.Errorf("body is not valid JSON: %v (at byte %d)", se, se.Offset)
	case errors.Is(err, io.EOF):
		return errors.New("body is empty; send a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return errors.New("body is not valid JSON: it ends early")
	}
	return fmt.Errorf("body: %s", strings.TrimPrefix(err.Error(), "json: "))
}

// KindOf names a Go type the way the API documentation does: "an
// integer", "a list", "an object".
func KindOf(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Uint64:
		return "an unsigned 64-bit integer"
	case reflect.Int, reflect.Int64:
		return "an integer"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Slice:
		return "a list"
	case reflect.Struct, reflect.Map, reflect.Pointer:
		return "an object"
	}
	return t.String()
}

// isTimeout reports whether err is a timeout.
func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}
