package cli

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kvrouter/kv-hint-operator/internal/filecheck"
	"github.com/kvrouter/kv-hint-operator/pkg/dispatch"
	"github.com/kvrouter/kv-hint-operator/pkg/hints/builtin"
)

// TestValidateJSON: --output json is one document a pipeline tool reads,
// with the same problems, lines and exit code as the text.
func TestValidateJSON(t *testing.T) {
	code, out, errOut := runCLI("validate", "-o", "json",
		"-f", "testdata/golden/kvcr-defaults.in.yaml",
		"-f", "../../config/samples/invalid/kvcopy-sender-duplicate.yaml",
		"-f", "testdata/golden/non-finite.in.yaml")
	if code != ExitInvalid || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	var got filecheck.Report
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	want := filecheck.Report{
		Valid: false,
		Files: []string{"testdata/golden/kvcr-defaults.in.yaml", "../../config/samples/invalid/kvcopy-sender-duplicate.yaml", "testdata/golden/non-finite.in.yaml"},
		Problems: []filecheck.Problem{
			{File: "testdata/golden/kvcr-defaults.in.yaml", Line: 5, Object: "role aggregated", Location: "worker_selection.aggregated", Type: "kvcr",
				Reason: "KVCopySenderUnused", Severity: "warning"},
			{File: "testdata/golden/non-finite.in.yaml", Line: 5, Object: "role decode", Location: "worker_selection.decode.parameters.shared_cache_multiplier", Type: "kvcr", Key: "shared_cache_multiplier",
				Reason: "InvalidParameters", Severity: "error"},
			{File: "testdata/golden/non-finite.in.yaml", Line: 10, Object: "role decode", Location: "worker_selection.decode.hints[1].parameters.ttl_seconds", Type: "kv-retain", Key: "ttl_seconds",
				Reason: "InvalidParameters", Severity: "error"},
			{File: "../../config/samples/invalid/kvcopy-sender-duplicate.yaml", Line: 12, Object: "RouterRole kvcopy-sender-duplicate", Location: "spec.hints", Type: "kvcr",
				Reason: "KVCopySenderDuplicate", Severity: "error"},
		},
	}
	for i := range got.Problems {
		if got.Problems[i].Message == "" {
			t.Errorf("problem %d has no message", i)
		}
		got.Problems[i].Message = ""
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("report (-want +got):\n%s", diff)
	}

	code, out, _ = runCLI("validate", "-o", "json", "-f", "testdata/golden/design-sample.in.yaml")
	if code != ExitOK || !strings.Contains(out, `"valid": true`) || !strings.Contains(out, `"problems": []`) {
		t.Errorf("valid file: exit %d\n%s", code, out)
	}
	code, out, _ = runCLI("validate", "-o", "json", "-f", filepath.Join(t.TempDir(), "nope.yaml"))
	if code != ExitUsage || !strings.Contains(out, `"reason": "ReadError"`) {
		t.Errorf("missing file: exit %d\n%s", code, out)
	}
	if code, _, errOut := runCLI("validate", "-o", "yaml", "-f", "testdata/golden/design-sample.in.yaml"); code != ExitUsage || !strings.Contains(errOut, "use text or json") {
		t.Errorf("-o yaml: exit %d: %s", code, errOut)
	}
}

// TestSidecarRefusesASecondDocument: the sidecar's dispatcher runs the
// same parse, so a hints YAML with two documents is refused whole (it used
// to run the first and answer 422 for the roles of the second).
func TestSidecarRefusesASecondDocument(t *testing.T) {
	data, err := os.ReadFile("testdata/golden/multi-document.in.yaml")
	if err != nil {
		t.Fatal(err)
	}
	d := dispatch.NewDispatcher(dispatch.Options{Catalog: builtin.NewCatalog()})
	err = d.Load(data, "multi-document.in.yaml")
	if !errors.Is(err, dispatch.ErrConfigRejected) || !strings.Contains(err.Error(), "2 YAML documents") {
		t.Fatalf("Load: %v; want it refused for its second document", err)
	}
	if d.Ready() {
		t.Error("the dispatcher is ready on a refused config")
	}
	if _, err := d.Book(context.Background(), &dispatch.Booking{RequestID: "r", Role: "decode", Worker: "w"}); !errors.Is(err, dispatch.ErrNotReady) {
		t.Errorf("booking: %v; want ErrNotReady", err)
	}
}

// TestManifestsWithoutObjects: manifests with no RouterRole or HintPolicy
// pass, with a warning that nothing was checked.
func TestManifestsWithoutObjects(t *testing.T) {
	f := filepath.Join(t.TempDir(), "cm.yaml")
	if err := os.WriteFile(f, []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, _ := runCLI("validate", "-f", f)
	if code != ExitOK || !strings.Contains(out, "NoObjects (warning): the manifests hold no RouterRole and no HintPolicy") {
		t.Errorf("exit %d\n%s", code, out)
	}
}
