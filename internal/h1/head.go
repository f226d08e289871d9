// Package h1 reads the head of an HTTP/1.x answer: the status line and the
// header fields that frame its body. kvhint's two lean keep-alive clients,
// the sidecar's hint poster and the load generator, share it and differ
// only in what they do with the body (discard it, or keep it).
package h1

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// ErrMalformed marks an answer that is not HTTP/1.x as these clients read it.
var ErrMalformed = errors.New("malformed HTTP answer")

// Malformed returns an error wrapping ErrMalformed.
func Malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
}

// Head is what an answer's status line and header fields say.
type Head struct {
	Code int
	// Text is the status line after the protocol, "404 Not Found". It is
	// set for answers outside 2xx, and for successes too when ReadHead was
	// asked to: the hint poster needs no text for a success and does not
	// pay an allocation for one.
	Text string
	// HTTP10 is set for an HTTP/1.0 answer, which has no transfer codings.
	HTTP10 bool
	// ContentLength is -1 when the answer has none.
	ContentLength int64
	// Chunked is set when Transfer-Encoding ends in chunked; it overrides
	// ContentLength (RFC 9112 6.3).
	Chunked bool
	// Close is set when the connection cannot carry another request:
	// Connection: close, or HTTP/1.0 without keep-alive.
	Close bool
}

// NoBody reports whether the answer has no body, whatever its headers say.
func (h *Head) NoBody() bool { return h.Code < 200 || h.Code == 204 || h.Code == 304 }

// ReadHead reads one answer's status line and header fields, up to the
// empty line; the body, if any, is next in br. A 1xx answer is returned as
// it is: the caller skips it and reads the next.
func ReadHead(br *bufio.Reader, successText bool) (Head, error) {
	h := Head{ContentLength: -1}
	line, err := ReadLine(br)
	if err != nil {
		return h, err
	}
	// HTTP/1.x SP 3DIGIT [SP reason]
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) || line[8] != ' ' || (len(line) > 12 && line[12] != ' ') {
		return h, Malformed("status line %q", truncate(line))
	}
	code, err := strconv.Atoi(string(line[9:12]))
	if err != nil || code < 100 {
		return h, Malformed("status line %q", truncate(line))
	}
	h.Code = code
	if successText || code < 200 || code > 299 {
		h.Text = string(line[9:])
	}
	h.HTTP10 = line[7] == '0'
	h.Close = h.HTTP10
	for {
		line, err := ReadLine(br)
		if err != nil {
			return h, err
		}
		if len(line) == 0 {
			return h, nil
		}
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 {
			return h, Malformed("header line %q", truncate(line))
		}
		name, value := line[:colon], bytes.TrimSpace(line[colon+1:])
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			n, err := strconv.ParseInt(string(value), 10, 64)
			if err != nil || n < 0 || (h.ContentLength >= 0 && n != h.ContentLength) {
				return h, Malformed("Content-Length %q", truncate(value))
			}
			h.ContentLength = n
		case bytes.EqualFold(name, []byte("Transfer-Encoding")) && !h.HTTP10:
			// HTTP/1.0 has no transfer codings: its body runs to the end
			// of the connection, as net/http reads it. Only chunked is
			// defined for answers here, and it must come last.
			if !bytes.EqualFold(lastToken(value), []byte("chunked")) {
				return h, Malformed("Transfer-Encoding %q", truncate(value))
			}
			h.Chunked = true
		case bytes.EqualFold(name, []byte("Connection")):
			for _, tok := range bytes.Split(value, []byte(",")) {
				tok = bytes.TrimSpace(tok)
				switch {
				case bytes.EqualFold(tok, []byte("close")):
					h.Close = true
				case h.HTTP10 && bytes.EqualFold(tok, []byte("keep-alive")):
					h.Close = false
				}
			}
		}
	}
}

// ReadLine returns one CRLF- (or LF-) terminated line without its end; the
// slice aliases br's buffer. A line cut short by the end of the stream is
// io.ErrUnexpectedEOF; a clean end before it is io.EOF.
func ReadLine(br *bufio.Reader) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if err != nil {
		if err == bufio.ErrBufferFull {
			return nil, Malformed("line over %d bytes", br.Size())
		}
		if len(line) > 0 {
			return nil, UnexpectedEOF(err)
		}
		return nil, err
	}
	line = line[:len(line)-1]
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	return line, nil
}

// ChunkSize reads a chunk-size line, extensions ignored.
func ChunkSize(br *bufio.Reader) (int64, error) {
	line, err := ReadLine(br)
	if err != nil {
		return 0, UnexpectedEOF(err)
	}
	if i := bytes.IndexByte(line, ';'); i >= 0 {
		line = line[:i]
	}
	size, err := strconv.ParseUint(string(bytes.TrimSpace(line)), 16, 63)
	if err != nil {
		return 0, Malformed("chunk size %q", truncate(line))
	}
	return int64(size), nil
}

// ChunkEnd reads the CRLF that follows a chunk's data.
func ChunkEnd(br *bufio.Reader) error {
	line, err := ReadLine(br)
	if err != nil {
		return UnexpectedEOF(err)
	}
	if len(line) != 0 {
		return Malformed("chunk not followed by CRLF")
	}
	return nil
}

// Trailers reads the trailer fields after the last chunk, up to the empty
// line, and drops them.
func Trailers(br *bufio.Reader) error {
	for {
		line, err := ReadLine(br)
		if err != nil {
			return UnexpectedEOF(err)
		}
		if len(line) == 0 {
			return nil
		}
	}
}

// UnexpectedEOF turns io.EOF into io.ErrUnexpectedEOF: the answer was cut.
func UnexpectedEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

func lastToken(v []byte) []byte {
	if i := bytes.LastIndexByte(v, ','); i >= 0 {
		v = v[i+1:]
	}
	return bytes.TrimSpace(v)
}

func truncate(b []byte) []byte {
	if len(b) > 64 {
		return b[:64]
	}
	return b
}
