package loadgen

import (
	"bufio"
	"io"
	"net"
	"strconv"

	"github.com/kvrouter/kv-hint-operator/internal/h1"
)

// This file is the generator's HTTP/1.1 client: one request at a time on a
// keep-alive connection, written by the pacer as one pre-encoded buffer and
// read back by the connection's own goroutine. It speaks enough HTTP/1.1 for
// a booking API: status line, headers, and a body delimited by
// Content-Length, chunked transfer coding or the end of the connection; no
// body on 1xx, 204 and 304. Interim 1xx answers are skipped.

// maxResponseBody bounds one answer's body; a hint is a few KiB.
const maxResponseBody = 16 << 20

// response is one parsed answer. body aliases the reader's buffer: valid
// until the next readResponse.
type response struct {
	status int
	// statusText is the status line after the protocol, "404 Not Found".
	statusText string
	body       []byte
	// close is set when the connection cannot carry another request.
	close bool
}

// protocolError reports an answer this client cannot read.
func protocolError(format string, args ...any) error { return h1.Malformed(format, args...) }

// readResponse reads one answer from br; buf is scratch space for the body
// and is returned, grown, for reuse.
func readResponse(br *bufio.Reader, buf []byte) (response, []byte, error) {
	for {
		r, buf, err := readOne(br, buf)
		if err != nil || r.status >= 200 {
			return r, buf, err
		}
		// 1xx: an interim answer, the real one follows.
	}
}

func readOne(br *bufio.Reader, buf []byte) (response, []byte, error) {
	var r response
	h, err := h1.ReadHead(br, true)
	if err != nil {
		return r, buf, err
	}
	r.status, r.statusText, r.close = h.Code, h.Text, h.Close

	buf = buf[:0]
	switch {
	case h.NoBody():
	case h.Chunked:
		buf, err = readChunked(br, buf)
	case h.ContentLength >= 0:
		if h.ContentLength > maxResponseBody {
			return r, buf, protocolError("body of %d bytes is over the %d-byte limit", h.ContentLength, maxResponseBody)
		}
		buf = grow(buf, int(h.ContentLength))
		_, err = io.ReadFull(br, buf)
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
	default:
		// Delimited by the end of the connection.
		r.close = true
		buf, err = readToEOF(br, buf)
	}
	r.body = buf
	return r, buf, err
}

func readChunked(br *bufio.Reader, buf []byte) ([]byte, error) {
	for {
		size, err := h1.ChunkSize(br)
		if err != nil {
			return buf, err
		}
		if size == 0 {
			return buf, h1.Trailers(br)
		}
		if int64(len(buf))+size > maxResponseBody {
			return buf, protocolError("body over the %d-byte limit", maxResponseBody)
		}
		n := len(buf)
		buf = grow(buf, n+int(size))
		if _, err := io.ReadFull(br, buf[n:]); err != nil {
			return buf, h1.UnexpectedEOF(err)
		}
		if err := h1.ChunkEnd(br); err != nil {
			return buf, err
		}
	}
}

func readToEOF(br *bufio.Reader, buf []byte) ([]byte, error) {
	for {
		if len(buf) == cap(buf) {
			if len(buf) >= maxResponseBody {
				return buf, protocolError("body over the %d-byte limit", maxResponseBody)
			}
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := br.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}

// grow returns buf resized to n bytes, its content kept, reallocated only
// when too small.
func grow(buf []byte, n int) []byte {
	if cap(buf) < n {
		b := make([]byte, n, max(n, 2*cap(buf)))
		copy(b, buf)
		return b
	}
	return buf[:n]
}

// requestHead is the head of every booking request, up to the body's length.
func requestHead(host, path string) []byte {
	return []byte("POST " + path + " HTTP/1.1\r\nHost: " + host + "\r\nUser-Agent: kvhint-loadgen\r\nContent-Type: application/json\r\nContent-Length: ")
}

// appendRequest appends a whole request: head, length, blank line, body.
func appendRequest(dst, head, body []byte) []byte {
	dst = append(dst, head...)
	dst = strconv.AppendInt(dst, int64(len(body)), 10)
	dst = append(dst, "\r\n\r\n"...)
	return append(dst, body...)
}

// dial opens a connection to the target: on TCP with Nagle's algorithm
// off (Go's default), or to a Unix socket.
func dial(t target, d *net.Dialer) (net.Conn, error) {
	return d.Dial(t.network, t.addr)
}
