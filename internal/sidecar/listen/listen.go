// Package listen opens and guards the sidecar's listeners: the booking
// address on TCP or a Unix socket (created with its mode, a stale socket
// replaced, a live one or any other file refused), connection caps that
// answer 503 over the cap, lingering close, and the net/http server limits
// every listener shares. It registers the listeners' metrics.
//
// It imports the standard library, Prometheus and pkg/dispatch (for the
// metrics namespace); nothing of the sidecar.
package listen

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// UnixScheme starts a --listen address that is a Unix domain socket:
// unix:///run/kvhint/booking.sock.
const UnixScheme = "unix://"

// DefaultListenMode is the file mode of the booking socket: the sidecar's
// user and group may connect, nobody else. On a Unix socket connect needs
// write permission, so the mode is the access control.
const DefaultListenMode fs.FileMode = 0o660

// maxSocketPath is the longest path a Unix socket address holds on Linux
// (sun_path is 108 bytes, its terminating NUL included).
const maxSocketPath = 107

// SocketPath returns the socket path of a unix:///PATH listen address, and
// whether addr is one. The path must be absolute and clean: a relative path
// would depend on the working directory, and unix://host/path is a typo.
func SocketPath(addr string) (string, bool, error) {
	rest, ok := strings.CutPrefix(addr, UnixScheme)
	if !ok {
		return "", false, nil
	}
	switch {
	case !strings.HasPrefix(rest, "/"):
		return "", true, fmt.Errorf("listen address %q: want unix:///ABSOLUTE/PATH (three slashes)", addr)
	case filepath.Clean(rest) != rest || strings.HasSuffix(rest, "/"):
		return "", true, fmt.Errorf("listen address %q: the socket path is not clean; write %s%s", addr, UnixScheme, filepath.Clean(rest))
	case len(rest) > maxSocketPath:
		return "", true, fmt.Errorf("listen address %q: the socket path is %d bytes, over the %d a Unix socket address holds", addr, len(rest), maxSocketPath)
	}
	return rest, true, nil
}

// Open opens a --listen address: host:port on TCP, or a Unix socket
// for unix:///PATH, created with mode.
func Open(addr string, mode fs.FileMode) (net.Listener, error) {
	path, isUnix, err := SocketPath(addr)
	if err != nil {
		return nil, err
	}
	if !isUnix {
		return net.Listen("tcp", addr)
	}
	return Unix(path, mode)
}

// Unix creates the socket path with mode and listens on it.
//
// A file left at the path is removed only if it is a socket nobody
// listens on (a stale one, from a sidecar that was killed): a regular
// file, a directory or a symbolic link is never removed, and a socket
// that answers belongs to a live process, so both are refused.
//
// The socket is bound in a private directory (mode 0700) beside the path,
// given its mode there, then linked into place: it never exists at the
// path with the mode the umask left, when a client could connect, and be
// queued for accept, before the chmod.
func Unix(path string, mode fs.FileMode) (net.Listener, error) {
	if mode&^fs.ModePerm != 0 {
		return nil, fmt.Errorf("socket %s: mode %#o has bits other than permissions", path, mode)
	}
	if err := removeStaleSocket(path); err != nil {
		return nil, err
	}
	dir := filepath.Dir(path)
	tmpDir, err := os.MkdirTemp(dir, ".kvhint-")
	if err != nil {
		return nil, fmt.Errorf("socket %s: cannot create it in %s: %w", path, dir, err)
	}
	defer os.RemoveAll(tmpDir)
	tmp := filepath.Join(tmpDir, "s")
	if len(tmp) > maxSocketPath {
		return nil, fmt.Errorf("socket %s: the path %s it is bound at first is over the %d bytes a Unix socket address holds; use a shorter directory", path, tmp, maxSocketPath)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("socket %s: %w", path, err)
	}
	// The path is removed by closeUnix below, not by the net package,
	// which knows only the temporary name.
	ln.SetUnlinkOnClose(false)
	fail := func(err error) (net.Listener, error) {
		ln.Close()
		return nil, fmt.Errorf("socket %s: %w", path, err)
	}
	if err := os.Chmod(tmp, mode); err != nil {
		return fail(err)
	}
	// A hard link, unlike a rename, never replaces what is at path: a file
	// put there since the check above stays, and the listen fails.
	if err := os.Link(tmp, path); err != nil {
		return fail(err)
	}
	fi, err := os.Lstat(path)
	if err != nil {
		return fail(err)
	}
	return &unixListener{UnixListener: ln, path: path, file: fi}, nil
}

// removeStaleSocket removes path if it is a socket no process listens on.
// Nothing at path is fine; anything else is an error that says what is
// there.
func removeStaleSocket(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("socket %s: %w", path, err)
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("socket %s: a %s is at that path; refusing to remove it (remove it yourself or choose another path)", path, fileKind(fi.Mode()))
	}
	c, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		c.Close()
		return fmt.Errorf("socket %s: another process listens on it (a second sidecar?); refusing to take it over", path)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("socket %s: cannot tell whether it is stale: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("socket %s: removing the stale socket: %w", path, err)
	}
	return nil
}

func fileKind(m fs.FileMode) string {
	switch m.Type() {
	case 0:
		return "regular file"
	case fs.ModeDir:
		return "directory"
	case fs.ModeSymlink:
		return "symbolic link"
	case fs.ModeNamedPipe:
		return "named pipe"
	case fs.ModeDevice, fs.ModeDevice | fs.ModeCharDevice:
		return "device"
	}
	return "file of type " + m.Type().String()
}

// unixListener is a listener on a socket path. It reports the path it was
// asked for, and removes it when closed, unless the path is no longer its
// socket (a new sidecar's, say).
type unixListener struct {
	*net.UnixListener
	path string
	file fs.FileInfo
}

func (l *unixListener) Addr() net.Addr { return &net.UnixAddr{Name: l.path, Net: "unix"} }

func (l *unixListener) Close() error {
	err := l.UnixListener.Close()
	if fi, serr := os.Lstat(l.path); serr == nil && os.SameFile(fi, l.file) {
		os.Remove(l.path)
	}
	return err
}

// Address is an address as --listen takes it: host:port, or
// unix:///PATH.
func Address(a net.Addr) string {
	if a.Network() == "unix" {
		return UnixScheme + a.String()
	}
	return a.String()
}

// InsecureAnyAddressFlag is the flag that lets --listen take a TCP address
// other than loopback.
const InsecureAnyAddressFlag = "--listen-insecure-any-address"

// CheckLoopback refuses a TCP --listen address that is not a loopback IP
// (0.0.0.0, ::, an empty host, a pod IP, a host name): no route of the
// booking listener is authenticated, so whoever reaches it books, reads
// the config and, in standalone mode, registers workers. A Unix socket is
// fine; its mode is its access control.
func CheckLoopback(addr string) error {
	if _, isUnix, err := SocketPath(addr); err != nil || isUnix {
		return err
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("listen address %q: %w", addr, err)
	}
	if ip, err := netip.ParseAddr(host); err == nil && ip.Unmap().IsLoopback() {
		return nil
	}
	return fmt.Errorf("listen address %q is not a loopback IP: the booking API is not authenticated, so anyone who reaches that address could book and register workers; listen on 127.0.0.1:PORT or unix:///PATH, or accept the risk with %s", addr, InsecureAnyAddressFlag)
}
