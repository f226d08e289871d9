package h1

import (
	"bufio"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The framing cases (lengths, chunks, errors) are tested through the
// caller, internal/loadgen's readResponse; this pins down what the head
// alone reports.
func TestReadHead(t *testing.T) {
	for _, tc := range []struct {
		name        string
		in          string
		successText bool
		want        Head
		rest        string
	}{
		{"success without text", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", false,
			Head{Code: 200, ContentLength: 2}, "ok"},
		{"success with text", "HTTP/1.1 201 Created\r\n\r\n", true,
			Head{Code: 201, Text: "201 Created", ContentLength: -1}, ""},
		{"failure always has text", "HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\n\r\n", false,
			Head{Code: 503, Text: "503 Service Unavailable", ContentLength: -1, Close: true}, ""},
		{"HTTP/1.0 closes", "HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", false,
			Head{Code: 200, HTTP10: true, ContentLength: -1, Close: true}, ""},
		{"HTTP/1.0 keep-alive", "HTTP/1.0 204 No Content\r\nConnection: Keep-Alive\r\n\r\n", false,
			Head{Code: 204, HTTP10: true, ContentLength: -1}, ""},
		{"chunked last", "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\nContent-Length: 3\r\n\r\n", false,
			Head{Code: 200, ContentLength: 3, Chunked: true}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			br := bufio.NewReader(strings.NewReader(tc.in))
			got, err := ReadHead(br, tc.successText)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("head (-want +got):\n%s", diff)
			}
			rest := make([]byte, 16)
			n, _ := br.Read(rest)
			if string(rest[:n]) != tc.rest {
				t.Errorf("left %q after the head, want %q", rest[:n], tc.rest)
			}
		})
	}
}
