package listen

import (
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/kvrouter/kv-hint-operator/internal/testing/sidecartest"
)

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
		path, isUnix, err := SocketPath(tc.addr)
		if path != tc.path || isUnix != tc.isUnix || (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("SocketPath(%q) = %q, %v, %v; want %q, %v, error with %q", tc.addr, path, isUnix, err, tc.path, tc.isUnix, tc.err)
		}
	}
}

// TestSocketStaleReplacedLiveRefused: a socket left by a killed sidecar
// (nobody listens) is replaced; one a live process listens on is not taken
// over.
func TestSocketStaleReplacedLiveRefused(t *testing.T) {
	dir := sidecartest.SocketDir(t)
	path := filepath.Join(dir, "booking.sock")

	live, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Unix(path, DefaultListenMode)
	if err == nil || !strings.Contains(err.Error(), "another process listens on it") {
		t.Fatalf("listening on a live socket: %v", err)
	}
	// What a killed process leaves: the file, nobody behind it.
	live.(*net.UnixListener).SetUnlinkOnClose(false)
	live.Close()
	if fi, err := os.Lstat(path); err != nil || fi.Mode().Type() != fs.ModeSocket {
		t.Fatalf("no stale socket to test with: %v", err)
	}
	ln, err := Unix(path, DefaultListenMode)
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
	path := filepath.Join(sidecartest.SocketDir(t), "booking.sock")
	old, err := Unix(path, DefaultListenMode)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	next, err := Unix(path, DefaultListenMode)
	if err != nil {
		t.Fatal(err)
	}
	defer next.Close()
	old.Close()
	if _, err := os.Lstat(path); err != nil {
		t.Errorf("closing the old listener removed the new one's socket: %v", err)
	}
}

// TestSocketUnwritableDirectory: a socket path in a directory the sidecar
// cannot write gives an error that names the path and the cause. Root may
// write anywhere, so as root the check runs in a child process as nobody.
func TestSocketUnwritableDirectory(t *testing.T) {
	if dir := os.Getenv("KVHINT_TEST_UNWRITABLE_DIR"); dir != "" {
		// The child: report the error on stdout.
		_, err := Unix(filepath.Join(dir, "booking.sock"), DefaultListenMode)
		fmt.Printf("LISTEN-ERROR: %v\n", err)
		return
	}
	base := sidecartest.SocketDir(t)
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(base, "ro")
	if err := os.Mkdir(dir, 0o555); err != nil {
		t.Fatal(err)
	}
	var msg string
	if os.Geteuid() != 0 {
		_, err := Unix(filepath.Join(dir, "booking.sock"), DefaultListenMode)
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

// TestCheckLoopback: the booking listener takes loopback IPs and Unix
// sockets; every other TCP address (every interface, a pod IP, a name) is
// refused with the flag that accepts the risk named.
func TestCheckLoopback(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:8790", "127.0.0.2:0", "[::1]:8790", "[::ffff:127.0.0.1]:1", "unix:///run/kvhint/booking.sock"} {
		if err := CheckLoopback(addr); err != nil {
			t.Errorf("%s refused: %v", addr, err)
		}
	}
	for _, addr := range []string{"0.0.0.0:8790", "[::]:8790", ":8790", "10.0.0.5:8790", "localhost:8790", "node.example:8790"} {
		if err := CheckLoopback(addr); err == nil || !strings.Contains(err.Error(), InsecureAnyAddressFlag) {
			t.Errorf("%s: %v, want a refusal naming %s", addr, err, InsecureAnyAddressFlag)
		}
	}
}
