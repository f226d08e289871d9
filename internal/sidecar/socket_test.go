package sidecar

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/kvrouter/kv-hint-operator/internal/sidecar/listen"
	"github.com/kvrouter/kv-hint-operator/pkg/router"
)

// socketDir is a short directory for sockets: t.TempDir's paths can pass
// the 107 bytes a socket address holds.
func socketDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "kvs-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// unixClient is an HTTP client that dials the socket at path whatever the
// URL's host, as curl --unix-socket does.
func unixClient(path string) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", path)
		},
	}}
}

func TestSocketPath(t *testing.T) {
	long := "/" + strings.Repeat("d", 120)
	for _, tc := range []struct {
		addr, path string
		isUnix     bool
		err        string
	}{
		{addr: "127.0.0.1:8790"},
		{addr: "unix:///run/kvhint/booking.sock", path: "/run/kvhint/booking.sock", isUnix: true},
		{addr: "unix://run/kvhint/booking.sock", isUnix: true, err: "three slashes"},
		{addr: "unix://", isUnix: true, err: "three slashes"},
		{addr: "unix:///run/../kvhint.sock", isUnix: true, err: "write unix:///kvhint.sock"},
		{addr: "unix:///run/kvhint/", isUnix: true, err: "not clean"},
		{addr: "unix://" + long, isUnix: true, err: "over the 107"},
	} {
		path, isUnix, err := listen.SocketPath(tc.addr)
		if path != tc.path || isUnix != tc.isUnix || (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("listen.SocketPath(%q) = %q, %v, %v; want %q, %v, error with %q", tc.addr, path, isUnix, err, tc.path, tc.isUnix, tc.err)
		}
	}
}

// TestSocketNeverRemovesAFile: a regular file, a directory or a symbolic
// link at the socket path is refused with an error that says what is there,
// and left as it was.
func TestSocketNeverRemovesAFile(t *testing.T) {
	dir := socketDir(t)
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

// TestSocketStaleReplacedLiveRefused: a socket left by a killed sidecar
// (nobody listens) is replaced; one a live process listens on is not taken
// over.
func TestSocketStaleReplacedLiveRefused(t *testing.T) {
	dir := socketDir(t)
	path := filepath.Join(dir, "booking.sock")

	live, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	_, err = listen.Unix(path, listen.DefaultListenMode)
	if err == nil || !strings.Contains(err.Error(), "another process listens on it") {
		t.Fatalf("listening on a live socket: %v", err)
	}
	// What a killed process leaves: the file, nobody behind it.
	live.(*net.UnixListener).SetUnlinkOnClose(false)
	live.Close()
	if fi, err := os.Lstat(path); err != nil || fi.Mode().Type() != fs.ModeSocket {
		t.Fatalf("no stale socket to test with: %v", err)
	}
	ln, err := listen.Unix(path, listen.DefaultListenMode)
	if err != nil {
		t.Fatalf("a stale socket was not replaced: %v", err)
	}
	ln.Close()
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Errorf("the socket is still there after Close: %v", err)
	}
	// Nothing else is left in the directory (the private bind directory).
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("left in %s: %v", dir, ents)
	}
}

// TestSocketCloseLeavesASuccessorsSocket: closing removes the path only
// while it is this listener's socket.
func TestSocketCloseLeavesASuccessorsSocket(t *testing.T) {
	path := filepath.Join(socketDir(t), "booking.sock")
	old, err := listen.Unix(path, listen.DefaultListenMode)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	next, err := listen.Unix(path, listen.DefaultListenMode)
	if err != nil {
		t.Fatal(err)
	}
	defer next.Close()
	old.Close()
	if _, err := os.Lstat(path); err != nil {
		t.Errorf("closing the old listener removed the new one's socket: %v", err)
	}
}

// TestSocketMode: the socket has the mode asked for, the umask ignored.
func TestSocketMode(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	for _, mode := range []fs.FileMode{0, 0o600, 0o660, 0o666} {
		t.Run(fmt.Sprintf("%#o", mode), func(t *testing.T) {
			path := filepath.Join(socketDir(t), "booking.sock")
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
	if _, err := listen.Unix(filepath.Join(socketDir(t), "s"), 0o4660); err == nil {
		t.Error("a setuid mode was taken")
	}
}

// TestSocketUnwritableDirectory: a socket path in a directory the sidecar
// cannot write gives an error that names the path and the cause. Root may
// write anywhere, so as root the check runs in a child process as nobody.
func TestSocketUnwritableDirectory(t *testing.T) {
	if dir := os.Getenv("KVHINT_TEST_UNWRITABLE_DIR"); dir != "" {
		// The child: report the error on stdout.
		_, err := listen.Unix(filepath.Join(dir, "booking.sock"), listen.DefaultListenMode)
		fmt.Printf("LISTEN-ERROR: %v\n", err)
		return
	}
	base := socketDir(t)
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(base, "ro")
	if err := os.Mkdir(dir, 0o555); err != nil {
		t.Fatal(err)
	}
	var msg string
	if os.Geteuid() != 0 {
		_, err := listen.Unix(filepath.Join(dir, "booking.sock"), listen.DefaultListenMode)
		if err == nil {
			t.Fatal("listened in a read-only directory")
		}
		msg = err.Error()
	} else {
		// Nobody must be able to run the test binary: copy it beside.
		self, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		bin := filepath.Join(base, "router.test")
		data, err := os.ReadFile(self)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(bin, data, 0o755); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, "-test.run=^TestSocketUnwritableDirectory$")
		cmd.Env = append(os.Environ(), "KVHINT_TEST_UNWRITABLE_DIR="+dir)
		cmd.Dir = base
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("child as nobody: %v\n%s", err, out)
		}
		_, line, ok := strings.Cut(string(out), "LISTEN-ERROR: ")
		if !ok {
			t.Fatalf("child said:\n%s", out)
		}
		msg, _, _ = strings.Cut(line, "\n")
	}
	t.Logf("error: %s", msg)
	for _, want := range []string{"socket " + filepath.Join(dir, "booking.sock"), "cannot create it in " + dir, "permission denied"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q lacks %q", msg, want)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("left in %s: %v", dir, ents)
	}
}

// TestSocketBooksAsTCP: a client in this process books over the socket and
// gets exactly the answer it gets over loopback TCP: status, headers but
// the date, and body. The socket listener keeps the connection cap, and
// the shutdown removes the socket.
func TestSocketBooksAsTCP(t *testing.T) {
	path := filepath.Join(socketDir(t), "booking.sock")
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
	eventually(t, 5*time.Second, func() error {
		if n := gathered(t, unix.Metrics, router.MetricsNamespace+"_open_connections", map[string]string{"listener": "booking"}); n != 0 {
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
	eventually(t, 5*time.Second, func() error {
		if n := gathered(t, unix.Metrics, router.MetricsNamespace+"_open_connections", map[string]string{"listener": "booking"}); n < 2 {
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
	if n := gathered(t, unix.Metrics, router.MetricsNamespace+"_connections_refused_total", map[string]string{"listener": "booking"}); n != 1 {
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
