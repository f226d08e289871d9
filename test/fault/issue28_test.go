package fault

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestMemoryLimitUnitMistake: the real binary given KVHINT_MEMORY_LIMIT=256
// (what limits.memory 256Mi gives with a resourceFieldRef divisor of 1Mi)
// refuses to start and names the mistake, where it used to run with a
// 179-byte Go memory limit.
func TestMemoryLimitUnitMistake(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "hints.yaml")
	writeFile(t, cfg, hintsConfig(0))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, kvhint, "sidecar", "--config-file", cfg, "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0")
	cmd.Env = append(cmd.Environ(), "KVHINT_MEMORY_LIMIT=256", "GOMEMLIMIT=")
	out, err := cmd.CombinedOutput()
	if err == nil || ctx.Err() != nil {
		t.Fatalf("the sidecar with KVHINT_MEMORY_LIMIT=256: %v (context %v)\n%s", err, ctx.Err(), out)
	}
	if want := "did you mean 256Mi? a resourceFieldRef divisor of 1Mi yields mebibytes"; !strings.Contains(string(out), want) {
		t.Errorf("output lacks %q:\n%s", want, out)
	}
}

// TestWorkerIDCollision: a PUT of an ID the workers file lists is 409;
// an ID registered over the API that the file then lists is taken over
// by the file, and the file's later reloads go on working, in the real
// binary over loopback.
func TestWorkerIDCollision(t *testing.T) {
	w := startWorker(t, "w")
	s := startSidecar(t, sidecarOpts{config: hintsConfig(0), workers: "workers:\n" + workerLine("filew", w.HintEndpoint())})
	body := fmt.Sprintf(`{"capabilities":["router_hint"],"hint_endpoint":%q}`, w.HintEndpoint())
	if a := do(t, http.MethodPut, s.booking+"/v1/workers/filew", body); a.code != http.StatusConflict {
		t.Errorf("PUT of the file's worker: %d %s, want 409", a.code, a.body)
	}
	if a := do(t, http.MethodPut, s.booking+"/v1/workers/apiw", body); a.code >= 300 {
		t.Fatalf("PUT apiw: %d %s", a.code, a.body)
	}
	workers := filepath.Join(s.dir, "workers.yaml")
	writeFile(t, workers, "workers:\n"+workerLine("filew", w.HintEndpoint())+workerLine("apiw", w.HintEndpoint()))
	eventually(t, 10*time.Second, "the file takes apiw", func() error {
		if src := listed(t, s)["apiw"]; src != "file" {
			return fmt.Errorf("apiw's source is %q, want file", src)
		}
		return nil
	})
	writeFile(t, workers, "workers:\n"+workerLine("filew", w.HintEndpoint())+workerLine("apiw", w.HintEndpoint())+workerLine("later", w.HintEndpoint()))
	eventually(t, 10*time.Second, "a later reload", func() error {
		if src := listed(t, s)["later"]; src != "file" {
			return fmt.Errorf("later's source is %q, want file: the reload did not apply", src)
		}
		return nil
	})
	if a := do(t, http.MethodPut, s.booking+"/v1/workers/apiw", body); a.code != http.StatusConflict {
		t.Errorf("PUT of apiw once the file lists it: %d %s, want 409", a.code, a.body)
	}
	if a := do(t, http.MethodGet, s.ops+"/readyz", ""); a.code != http.StatusOK {
		t.Errorf("/readyz: %d %s", a.code, a.body)
	}
}

// TestSlowSendersDoNotStarveLongBookings: six connections declare 1 MiB
// booking bodies and send 4 KiB of each, then nothing, for the read
// timeout; meanwhile a 47,000-hash booking from another connection is
// answered, not 503. Charged by the declared length the six held 36 MiB
// of the 32 MiB budget and every long booking got 503 until they timed
// out (the report).
func TestSlowSendersDoNotStarveLongBookings(t *testing.T) {
	sink := startSink(t)
	s := startSidecar(t, sidecarOpts{config: hintsConfig(0), workers: "workers:\n" + workerLine("p0", sink.HintEndpoint())})
	addr := strings.TrimPrefix(s.booking, "http://")
	for i := range 6 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		head := fmt.Sprintf("POST /v1/bookings HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", 1<<20)
		if _, err := c.Write(append([]byte(head), bytes.Repeat([]byte(" "), 4<<10)...)); err != nil {
			t.Fatalf("slow sender %d: %v", i, err)
		}
	}
	eventually(t, 10*time.Second, "the six bodies charged", func() error {
		if v := scrape(t, s.ops)["kvhint_router_booking_memory_bytes"]; v < 6*128<<10 {
			return fmt.Errorf("booking_memory_bytes %v, want the six slow bodies' charge", v)
		}
		return nil
	})
	t.Logf("six slow senders hold %v bytes of the booking budget", scrape(t, s.ops)["kvhint_router_booking_memory_bytes"])
	r := newRouter(s, 1)
	resp, err := r.c.Post(r.url, "application/json", bytes.NewReader(bookingBody("long", "prefill", "p0", 47000)))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("a 47,000-hash booking beside six slow 1 MiB senders: %d %.200s, want 200", resp.StatusCode, b)
	}
}
