package workers

import (
	"errors"
	"fmt"
	"testing"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvrouter/kv-hint-operator/internal/testing/sidecartest"
)

// TestSourceCap: each source holds at most its cap; a worker it has is
// replaced in place, a new one past the cap is refused with ErrSourceFull
// and counted, and another source has a cap of its own. Replace keeps the
// workers in service before new ones, and counts a surplus it is given
// again only once.
func TestSourceCap(t *testing.T) {
	reg := prometheus.NewRegistry()
	r := NewRegistry(nil)
	r.RegisterMetrics(reg)
	r.SetMaxPerSource(3, logr.Discard())
	over := func(source string) float64 {
		return sidecartest.Gathered(t, reg, "kvhint_router_workers_over_limit_total", map[string]string{"source": source})
	}
	for i := range 3 {
		if err := r.Set(SourceAPI, WorkerSpec{ID: fmt.Sprint("a", i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Set(SourceAPI, WorkerSpec{ID: "a3"}); !errors.Is(err, ErrSourceFull) {
		t.Fatalf("a fourth worker: %v, want ErrSourceFull", err)
	}
	if err := r.Set(SourceAPI, WorkerSpec{ID: "a1", WorkerType: "decode"}); err != nil {
		t.Fatalf("replacing a worker of a full source: %v", err)
	}
	if got := over(SourceAPI); got != 1 {
		t.Errorf("over-limit count %v, want 1", got)
	}

	specs := func(ids ...string) []WorkerSpec {
		var out []WorkerSpec
		for _, id := range ids {
			out = append(out, WorkerSpec{ID: id})
		}
		return out
	}
	if err := r.Replace(SourceFile, specs("f0", "f1")); err != nil {
		t.Fatal(err)
	}
	// f0 and f1 are in service: they stay, and one of the new ones fits.
	for range 2 {
		if err := r.Replace(SourceFile, specs("n0", "n1", "f1", "n2", "f0")); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	for _, w := range r.List() {
		if w.Source == SourceFile {
			got = append(got, w.ID)
		}
	}
	if want := []string{"f0", "f1", "n0"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("file workers %v, want %v", got, want)
	}
	if got := over(SourceFile); got != 2 {
		t.Errorf("file over-limit count %v after the same surplus twice, want 2", got)
	}
	if n, _ := r.Stats(); n != 6 {
		t.Errorf("%d workers, want 3 per source", n)
	}
}
