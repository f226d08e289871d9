package sidecar

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kvrouter/kv-hint-operator/internal/testing/sidecartest"
	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"

	"github.com/google/go-cmp/cmp"

	"github.com/kvrouter/kv-hint-operator/internal/sidecar/dispatchmetrics"
	"github.com/kvrouter/kv-hint-operator/internal/sidecar/listen"
)

// unixClient is an HTTP client that dials the socket at path whatever the
// URL's host, as curl --unix-socket does.
func unixClient(path string) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", path)
		},
	}}
}

// TestSocketNeverRemovesAFile: a regular file, a directory or a symbolic
// link at the socket path is refused with an error that says what is there,
// and left as it was.
func TestSocketNeverRemovesAFile(t *testing.T) {
	dir := sidecartest.SocketDir(t)
	target := filepath.Join(dir, "precious")
	if err := os.WriteFile(target, []byte("keep me"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, kind string
		make       func(path string) error
	}{
		{"file", "regular file", func(p string) error { return os.WriteFile(p, []byte("keep me"), 0o600) }},
		{"dir", "directory", func(p string) error { return os.Mkdir(p, 0o700) }},
		{"link", "symbolic link", func(p string) error { return os.Symlink(target, p) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, tc.name+".sock")
			if err := tc.make(path); err != nil {
				t.Fatal(err)
			}
			before, err := os.Lstat(path)
			if err != nil {
				t.Fatal(err)
			}
			s, err := New(Options{Catalog: testCatalog(t), ConfigFile: "/nonexistent", Listen: listen.UnixScheme + path, OpsListen: "127.0.0.1:0", Log: testLogger(t)})
			if err != nil {
				t.Fatal(err)
			}
			err = s.Start(context.Background())
			if err == nil {
				s.Shutdown(context.Background())
				t.Fatalf("the sidecar listened on %s, where a %s was", path, tc.kind)
			}
			if want := "a " + tc.kind + " is at that path; refusing to remove it"; !strings.Contains(err.Error(), want) {
				t.Errorf("error %q lacks %q", err, want)
			}
			after, err := os.Lstat(path)
			if err != nil || !os.SameFile(before, after) {
				t.Fatalf("the %s at %s is gone or replaced: %v", tc.kind, path, err)
			}
			if b, err := os.ReadFile(target); err != nil || string(b) != "keep me" {
				t.Errorf("%s: %q, %v", target, b, err)
			}
		})
	}
}

// TestSocketMode: the socket has the mode asked for, the umask ignored.
func TestSocketMode(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	for _, mode := range []fs.FileMode{0, 0o600, 0o660, 0o666} {
		t.Run(fmt.Sprintf("%#o", mode), func(t *testing.T) {
			path := filepath.Join(sidecartest.SocketDir(t), "booking.sock")
			s := startSidecarWithConfig(t, testCatalog(t), dispatchConfig, func(o *Options) {
				o.Listen, o.ListenMode = listen.UnixScheme+path, mode
			})
			fi, err := os.Lstat(path)
			if err != nil {
				t.Fatal(err)
			}
			want := mode
			if want == 0 {
				want = listen.DefaultListenMode
			}
			if fi.Mode().Type() != fs.ModeSocket || fi.Mode().Perm() != want {
				t.Errorf("%s is %v, want a socket with mode %v", path, fi.Mode(), want)
			}
			if got := s.BookingListen(); got != listen.UnixScheme+path {
				t.Errorf("BookingListen() = %q", got)
			}
		})
	}
	if _, err := listen.Unix(filepath.Join(sidecartest.SocketDir(t), "s"), 0o4660); err == nil {
		t.Error("a setuid mode was taken")
	}
}

// TestSocketBooksAsTCP: a client in this process books over the socket and
// gets exactly the answer it gets over loopback TCP: status, headers but
// the date, and body. The socket listener keeps the connection cap, and
// the shutdown removes the socket.
func TestSocketBooksAsTCP(t *testing.T) {
	path := filepath.Join(sidecartest.SocketDir(t), "booking.sock")
	tcp := startSidecarWithConfig(t, testCatalog(t), dispatchConfig, nil)
	unix := startSidecarWithConfig(t, testCatalog(t), dispatchConfig, func(o *Options) {
		o.Listen = listen.UnixScheme + path
		o.MaxBookingConns = 2
	})
	w := startWorker(t, "w")
	registerWorker(t, tcp, w)
	uc := unixClient(path)
	req, _ := http.NewRequest(http.MethodPut, "http://localhost/v1/workers/w",
		strings.NewReader(fmt.Sprintf(`{"capabilities":["router_hint"],"hint_endpoint":%q,"worker_type":"decode"}`, w.HintEndpoint())))
	resp, err := uc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("registering over the socket: %s", resp.Status)
	}

	book := func(c *http.Client, url, body string) response {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		r := roundTrip(t, c, req)
		r.header.Del("Date")
		return r
	}
	for _, body := range []string{
		bookingJSON("same-1", "aggregated", "w", ""),
		bookingJSON("same-2", "aggregated", "nobody", ""),
		`{"request_id":`,
		bookingJSON("same-3", "no-such-role", "w", ""),
		bookingJSON("same-4", "decode", "w", `"session":{"id":"s","turn":1,"final":true}`),
	} {
		overTCP := book(http.DefaultClient, "http://"+tcp.BookingAddr()+"/v1/bookings", body)
		overUnix := book(uc, "http://localhost/v1/bookings", body)
		if diff := cmp.Diff(overTCP, overUnix, cmp.AllowUnexported(response{})); diff != "" {
			t.Errorf("booking %s: over the socket (+) not as over TCP (-):\n%s", body, diff)
		}
		if overTCP.status == 0 {
			t.Errorf("booking %s: no answer", body)
		}
	}

	// The connection cap: a third connection is answered 503 and closed.
	uc.CloseIdleConnections()
	testenv.Eventually(t, 5*time.Second, "the socket's booking connection open", func(context.Context) error {
		if n := gathered(t, unix.Metrics, dispatchmetrics.Namespace+"_open_connections", map[string]string{"listener": "booking"}); n != 0 {
			return fmt.Errorf("%v booking connections open", n)
		}
		return nil
	})
	var conns []net.Conn
	for range 2 {
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns = append(conns, c)
	}
	testenv.Eventually(t, 5*time.Second, "the socket's booking connection closed", func(context.Context) error {
		if n := gathered(t, unix.Metrics, dispatchmetrics.Namespace+"_open_connections", map[string]string{"listener": "booking"}); n < 2 {
			return fmt.Errorf("%v booking connections open", n)
		}
		return nil
	})
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, _ := io.ReadAll(c)
	if !strings.HasPrefix(string(got), "HTTP/1.1 503 ") {
		t.Errorf("over the cap: read %q, want a 503", got)
	}
	if n := gathered(t, unix.Metrics, dispatchmetrics.Namespace+"_connections_refused_total", map[string]string{"listener": "booking"}); n != 1 {
		t.Errorf("connections_refused_total{listener=booking} = %v, want 1", n)
	}

	for _, c := range conns {
		c.Close()
	}
	if err := unix.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Errorf("the socket is still there after shutdown: %v", err)
	}
}
