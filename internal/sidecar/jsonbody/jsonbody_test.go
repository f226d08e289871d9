package jsonbody_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kv-hint-operator/internal/sidecar/jsonbody"
)

// booking is a request body of the shape the sidecar's routes take: a
// string, an unsigned integer, a list and a nested object.
type booking struct {
	Role   string   `json:"role"`
	Blocks uint64   `json:"blocks"`
	Hashes []string `json:"hashes"`
	Worker struct {
		ID int `json:"id"`
	} `json:"worker"`
}

const testLimit = 64

// server serves jsonbody.Read over loopback as the sidecar's routes do:
// the status and the error's text on failure, "ok role=…" on success. It
// reads with the limit given and the request's Content-Length.
func server(t *testing.T, limit int, readTimeout time.Duration) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b booking
		status, err := jsonbody.Read(r.Body, int(r.ContentLength), limit, &b)
		if err != nil {
			http.Error(w, err.Error(), status)
			return
		}
		fmt.Fprintf(w, "ok role=%s blocks=%d hashes=%d worker=%d\n", b.Role, b.Blocks, len(b.Hashes), b.Worker.ID)
	}))
	srv.Config.ReadTimeout = readTimeout
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// post sends body; chunked hides its length so that the server learns it
// only by reading.
func post(t *testing.T, url, body string, chunked bool) (int, string) {
	t.Helper()
	var r io.Reader = strings.NewReader(body)
	if chunked {
		r = io.MultiReader(r) // not a *strings.Reader: length unknown to the client
	}
	req, err := http.NewRequest(http.MethodPost, url, r)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, strings.TrimSpace(string(got))
}

// raw writes request as it is on a new connection to srv, without
// closing its side, and returns the answer's status and body: how a
// client that has not sent (all of) its body sees the server's answer.
func raw(t *testing.T, srv *httptest.Server, request string) (int, string) {
	t.Helper()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(conn, request); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to %q: %v", request, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// TestReadOverHTTP pins what a client of a jsonbody route sees: the cap
// at exactly limit bytes whether or not the length is declared, and each
// kind of bad body answered 400 with an error in the body's terms.
func TestReadOverHTTP(t *testing.T) {
	srv := server(t, testLimit, 0)
	exact := `{"role":"decode","hashes":["` + strings.Repeat("a", testLimit-len(`{"role":"decode","hashes":[""]}`)) + `"]}`
	if len(exact) != testLimit {
		t.Fatalf("test body is %d bytes, want %d", len(exact), testLimit)
	}
	over := exact + " "
	for _, tc := range []struct {
		name, body string
		wantStatus int
		wantBody   string
	}{
		{"valid", `{"role":"pd","blocks":3,"hashes":["a","b"],"worker":{"id":7}}`, 200, "ok role=pd blocks=3 hashes=2 worker=7"},
		{"exactly at the limit", exact, 200, "ok role=decode blocks=0 hashes=1 worker=0"},
		{"one byte over the limit", over, http.StatusRequestEntityTooLarge, "body is over the 64-byte limit"},
		{"empty", ``, 400, "body is empty; send a JSON object"},
		{"not JSON", `role=decode`, 400, "body is not valid JSON: invalid character 'r' looking for beginning of value (at byte 1)"},
		{"ends early", `{"role":"dec`, 400, "body is not valid JSON: it ends early"},
		{"an array, not an object", `["decode"]`, 400, "body is a JSON array; send a JSON object"},
		{"unknown field", `{"role":"decode","rol":"x"}`, 400, `body: unknown field "rol"`},
		{"string for an integer", `{"blocks":"3"}`, 400, "blocks: got string, want an unsigned 64-bit integer"},
		{"negative for an unsigned", `{"blocks":-1}`, 400, "blocks: got number -1, want an unsigned 64-bit integer"},
		{"object for a list", `{"hashes":{}}`, 400, "hashes: got object, want a list"},
		{"nested field's type", `{"worker":{"id":true}}`, 400, "worker.id: got bool, want an integer"},
		{"data after the object", `{"role":"decode"} {}`, 400, "body has data after the JSON object"},
	} {
		for _, chunked := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/chunked=%v", tc.name, chunked), func(t *testing.T) {
				status, body := post(t, srv.URL, tc.body, chunked)
				if status != tc.wantStatus || body != tc.wantBody {
					t.Errorf("got %d %q, want %d %q", status, body, tc.wantStatus, tc.wantBody)
				}
			})
		}
	}
}

// TestDeclaredOverLimitReadsNothing pins that a Content-Length over the
// limit is refused before the body is read: the client gets its 413 while
// it has sent only the headers and keeps the rest.
func TestDeclaredOverLimitReadsNothing(t *testing.T) {
	srv := server(t, testLimit, 0)
	// A megabyte declared, no byte of it sent.
	status, got := raw(t, srv, fmt.Sprintf("POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", 1<<20))
	if status != http.StatusRequestEntityTooLarge || strings.TrimSpace(string(got)) != "body is over the 64-byte limit" {
		t.Errorf("got %d %q, want 413 %q", status, got, "body is over the 64-byte limit")
	}
}

// TestSlowBodyIsATimeout pins the 408: a body still arriving when the
// server's read timeout passes is the client's slowness, not a bad body.
func TestSlowBodyIsATimeout(t *testing.T) {
	srv := server(t, 1<<10, 300*time.Millisecond)
	// Half the declared body; the rest never comes.
	status, got := raw(t, srv, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 40\r\n\r\n{\"role\":\"decode\",")
	const want = "reading the body: the body did not arrive within the read timeout: "
	if status != http.StatusRequestTimeout || !strings.HasPrefix(got, want) {
		t.Errorf("got %d %q, want 408 starting %q", status, got, want)
	}
}

// TestReadBodyKeepsWhatArrived pins ReadBody's own contract: it appends to
// the buffer it is given, and a declared length that lies (larger than
// what arrives) costs only what arrives.
func TestReadBodyKeepsWhatArrived(t *testing.T) {
	buf := append(make([]byte, 0, 4), "x"...)
	got, status, err := jsonbody.ReadBody(strings.NewReader(`{"a":1}`), 1<<20, 1<<21, buf)
	if err != nil || status != 0 {
		t.Fatalf("got status %d, error %v", status, err)
	}
	if string(got) != `x{"a":1}` {
		t.Errorf("got %q, want the body appended to %q", got, "x")
	}
	if cap(got) > 1<<10 {
		t.Errorf("a declared megabyte grew the buffer to %d bytes for a 7-byte body", cap(got))
	}
}

// TestPooledBuffers pins that a buffer grown past what the pool keeps is
// not handed out again, and that a kept one comes back empty.
func TestPooledBuffers(t *testing.T) {
	bp := jsonbody.GetBuf()
	if len(*bp) != 0 {
		t.Fatalf("a pooled buffer holds %d bytes", len(*bp))
	}
	*bp = append(*bp, "leftover"...)
	jsonbody.PutBuf(bp)
	// The pool may drop anything; whatever it hands out must be empty.
	for range 10 {
		b := jsonbody.GetBuf()
		if len(*b) != 0 {
			t.Fatalf("GetBuf returned a buffer holding %q", *b)
		}
		jsonbody.PutBuf(b)
	}
}
