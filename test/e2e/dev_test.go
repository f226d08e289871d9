package e2e

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestDevCommand runs the README's first command as a person would, bounded:
// kvhint dev starts its own control plane and processes, and exits 0 only
// when every sample role is Ready and hints reached the workers.
func TestDevCommand(t *testing.T) {
	requireEnv(t)
	cmd := exec.Command(kvhint, "dev", "--duration", "20s", "--interval", "4s", "--assets", os.Getenv("KUBEBUILDER_ASSETS"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kvhint dev: %v\n%s", err, out)
	}
	for _, want := range []string{
		"kvhint dev: applied 6 objects of config/samples",
		"export KUBECONFIG=",
		"COMPILED HASH",
		"kvhint dev: OK: every RouterRole is Ready",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// The worker without router_hint is listed, and received nothing.
	found := false
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) >= 4 && f[0] == "llama-decode-1" {
			found = true
			if f[2] != "no" || f[3] != "0" {
				t.Errorf("llama-decode-1 row %q: want router_hint no and 0 hints", line)
			}
		}
	}
	if !found {
		t.Errorf("no llama-decode-1 row in:\n%s", out)
	}
}

// TestDevCommandBookingSocket: kvhint dev --booking-socket runs the
// sidecars on Unix sockets and books over them, with the same verdict.
func TestDevCommandBookingSocket(t *testing.T) {
	requireEnv(t)
	cmd := exec.Command(kvhint, "dev", "--booking-socket", "--duration", "20s", "--interval", "4s", "--assets", os.Getenv("KUBEBUILDER_ASSETS"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kvhint dev --booking-socket: %v\n%s", err, out)
	}
	for _, want := range []string{
		"sidecars up, one per router, booking on Unix sockets in ",
		"kvhint dev: OK: every RouterRole is Ready",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// The last count of bookings through llama's socket: some answered,
	// none failed.
	var last string
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "bookings via llama: ") {
			last = line
		}
	}
	if last == "" || strings.HasPrefix(last, "bookings via llama: 0 answered") || !strings.Contains(last, " 0 errors") {
		t.Errorf("bookings over llama's socket: %q, want some answered and 0 errors:\n%s", last, out)
	}
}
