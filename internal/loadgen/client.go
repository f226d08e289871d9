package loadgen

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
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

// errProtocol marks answers that are not HTTP/1.1 as this client reads it.
var errProtocol = errors.New("malformed HTTP response")

func protocolError(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errProtocol, fmt.Sprintf(format, args...))
}

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
	line, err := readLine(br)
	if err != nil {
		return r, buf, err
	}
	// HTTP/1.x SP 3DIGIT [SP reason]
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) || line[8] != ' ' || (len(line) > 12 && line[12] != ' ') {
		return r, buf, protocolError("status line %q", truncate(line))
	}
	http10 := line[7] == '0'
	code, err := strconv.Atoi(string(line[9:12]))
	if err != nil || code < 100 {
		return r, buf, protocolError("status line %q", truncate(line))
	}
	r.status = code
	r.statusText = string(line[9:])
	r.close = http10

	contentLength := int64(-1)
	chunked := false
	for {
		line, err := readLine(br)
		if err != nil {
			return r, buf, err
		}
		if len(line) == 0 {
			break
		}
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 {
			return r, buf, protocolError("header line %q", truncate(line))
		}
		name, value := line[:colon], bytes.TrimSpace(line[colon+1:])
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			n, err := strconv.ParseInt(string(value), 10, 64)
			if err != nil || n < 0 || (contentLength >= 0 && n != contentLength) {
				return r, buf, protocolError("Content-Length %q", truncate(value))
			}
			contentLength = n
		case bytes.EqualFold(name, []byte("Transfer-Encoding")) && !http10:
			// (HTTP/1.0 has no transfer codings: the body runs to the
			// end of the connection, as net/http reads it.) Only chunked
			// is defined for responses here, and it must come last.
			if !bytes.EqualFold(lastToken(value), []byte("chunked")) {
				return r, buf, protocolError("Transfer-Encoding %q", truncate(value))
			}
			chunked = true
		case bytes.EqualFold(name, []byte("Connection")):
			for _, tok := range bytes.Split(value, []byte(",")) {
				tok = bytes.TrimSpace(tok)
				switch {
				case bytes.EqualFold(tok, []byte("close")):
					r.close = true
				case bytes.EqualFold(tok, []byte("keep-alive")) && http10:
					r.close = false
				}
			}
		}
	}

	buf = buf[:0]
	switch {
	case code < 200 || code == 204 || code == 304:
		// No body, whatever the headers say.
	case chunked:
		// Transfer-Encoding overrides Content-Length (RFC 9112 6.3).
		buf, err = readChunked(br, buf)
	case contentLength >= 0:
		if contentLength > maxResponseBody {
			return r, buf, protocolError("body of %d bytes is over the %d-byte limit", contentLength, maxResponseBody)
		}
		buf = grow(buf, int(contentLength))
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

// readLine returns one CRLF- (or LF-) terminated line without its end. The
// slice aliases br's buffer.
func readLine(br *bufio.Reader) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if err != nil {
		if err == bufio.ErrBufferFull {
			return nil, protocolError("line over %d bytes", br.Size())
		}
		if err == io.EOF && len(line) > 0 {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	line = line[:len(line)-1]
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	return line, nil
}

func readChunked(br *bufio.Reader, buf []byte) ([]byte, error) {
	for {
		line, err := readLine(br)
		if err != nil {
			return buf, eofIsUnexpected(err)
		}
		if i := bytes.IndexByte(line, ';'); i >= 0 {
			line = line[:i] // chunk extensions
		}
		size, err := strconv.ParseUint(string(bytes.TrimSpace(line)), 16, 63)
		if err != nil {
			return buf, protocolError("chunk size %q", truncate(line))
		}
		if size == 0 {
			// Trailers, up to the empty line.
			for {
				line, err := readLine(br)
				if err != nil {
					return buf, eofIsUnexpected(err)
				}
				if len(line) == 0 {
					return buf, nil
				}
			}
		}
		if uint64(len(buf))+size > maxResponseBody {
			return buf, protocolError("body over the %d-byte limit", maxResponseBody)
		}
		n := len(buf)
		buf = grow(buf, n+int(size))
		if _, err := io.ReadFull(br, buf[n:]); err != nil {
			return buf, eofIsUnexpected(err)
		}
		line, err = readLine(br)
		if err != nil {
			return buf, eofIsUnexpected(err)
		}
		if len(line) != 0 {
			return buf, protocolError("chunk not followed by CRLF")
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

func lastToken(v []byte) []byte {
	if i := bytes.LastIndexByte(v, ','); i >= 0 {
		v = v[i+1:]
	}
	return bytes.TrimSpace(v)
}

func eofIsUnexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

func truncate(b []byte) []byte {
	if len(b) > 64 {
		return b[:64]
	}
	return b
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

// dial opens a connection with Nagle's algorithm off (Go's default for TCP).
func dial(addr string, d *net.Dialer) (net.Conn, error) {
	return d.Dial("tcp", addr)
}
