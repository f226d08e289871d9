package e2e

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDevCommand runs the README's first command as a person would, bounded:
// kvhint-dev dev (what make dev runs) starts its own control plane and
// processes, and exits 0 only when every sample role is Ready and hints
// reached, in-band, exactly the workers that advertise router_hint.
func TestDevCommand(t *testing.T) {
	requireEnv(t)
	// Each dev run is its own control plane and processes on free ports,
	// and lasts its --duration whatever the machine's speed: the two run
	// side by side.
	t.Parallel()
	cmd := exec.Command(devBin, "dev", "--duration", "20s", "--interval", "4s", "--assets", env.CP.Assets)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kvhint-dev dev: %v\n%s", err, out)
	}
	for _, want := range []string{
		"kvhint-dev dev: applied 6 objects of config/samples",
		"export KUBECONFIG=",
		"COMPILED HASH",
		"kvhint-dev dev: OK: every RouterRole is Ready",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// The last status table's worker rows: WORKER ROUTER ROUTER_HINT
	// IN-BAND PUSHED REQUESTS REJECTED. The worker without router_hint
	// served requests and received no hint; the others received theirs
	// in-band; nothing was pushed, as no worker advertises a hint endpoint.
	rows := map[string][]string{}
	for _, line := range strings.Split(string(out), "\n") {
		// Later tables overwrite earlier ones: the last one is kept.
		if f := strings.Fields(line); len(f) >= 7 {
			rows[f[0]] = f
		}
	}
	for _, id := range []string{"llama-prefill-0", "llama-prefill-1", "llama-decode-0", "llama-decode-1", "chat-0", "chat-1"} {
		f := rows[id]
		switch {
		case len(f) < 7:
			t.Errorf("no %s row in:\n%s", id, out)
		case f[4] != "-" || f[5] == "0" || f[6] != "0":
			t.Errorf("%s row %q: want nothing pushed, some requests served, none refused", id, f)
		case id == "llama-decode-1" && (f[2] != "no" || f[3] != "0"):
			t.Errorf("%s row %q: want router_hint no and 0 hints in-band", id, f)
		case id != "llama-decode-1" && (f[2] != "yes" || f[3] == "0"):
			t.Errorf("%s row %q: want router_hint yes and some hints in-band", id, f)
		}
	}
	if !strings.Contains(string(out), "hints carried at kv_transfer_params.kv_hint") {
		t.Errorf("output does not say where hints are carried:\n%s", out)
	}
}

// TestDevCommandBookingSocket: kvhint-dev dev --booking-socket runs the
// sidecars on Unix sockets and books over them, with the same verdict.
func TestDevCommandBookingSocket(t *testing.T) {
	requireEnv(t)
	t.Parallel()
	cmd := exec.Command(devBin, "dev", "--booking-socket", "--duration", "20s", "--interval", "4s", "--assets", env.CP.Assets)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kvhint-dev dev --booking-socket: %v\n%s", err, out)
	}
	for _, want := range []string{
		"sidecars up, 1 per router, booking on Unix sockets in ",
		"kvhint-dev dev: OK: every RouterRole is Ready",
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
