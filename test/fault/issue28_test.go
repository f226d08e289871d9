package fault

import (
	"context"
	"fmt"
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
