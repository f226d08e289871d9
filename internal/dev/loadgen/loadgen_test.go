package loadgen

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

type booking struct {
	RequestID string `json:"request_id"`
	Role      string `json:"role"`
	Worker    string `json:"worker"`
	Prompt    int    `json:"prompt_tokens"`
	BlockSize int    `json:"block_size"`
	Session   struct {
		ID    string `json:"id"`
		Turn  int    `json:"turn"`
		Final bool   `json:"final"`
	} `json:"session"`
	Copy *struct {
		SourceWorker string   `json:"source_worker"`
		Endpoint     string   `json:"source_endpoint"`
		Hashes       []uint64 `json:"block_hashes"`
	} `json:"committed_kv_copy"`
}

func TestStreamShape(t *testing.T) {
	o := Options{Roles: []Role{{Name: "prefill", Workers: []string{"p0"}}, {Name: "decode", Workers: []string{"d0", "d1"}, CopyRate: 0.5}},
		MaxTurns: 4, BlockSize: 16, Seed: 7}
	bodies := newStream(o).bodies(4000)
	if len(bodies) != 4000 {
		t.Fatalf("%d bodies", len(bodies))
	}
	turns := map[string]int{}
	finals := map[string]bool{}
	copies := 0
	for i, body := range bodies {
		var b booking
		if err := json.Unmarshal(body, &b); err != nil {
			t.Fatalf("body %d is not JSON: %v\n%s", i, err, body)
		}
		wantRole := []string{"prefill", "decode"}[i%2]
		if b.Role != wantRole {
			t.Fatalf("body %d role %s, want %s", i, b.Role, wantRole)
		}
		if finals[b.Session.ID] {
			t.Fatalf("session %s booked after its final turn", b.Session.ID)
		}
		if b.Role == "prefill" {
			if b.Session.Turn != turns[b.Session.ID]+1 {
				t.Fatalf("session %s turn %d after %d", b.Session.ID, b.Session.Turn, turns[b.Session.ID])
			}
			turns[b.Session.ID] = b.Session.Turn
		}
		if b.Role == "decode" && b.Session.Final {
			finals[b.Session.ID] = true
		}
		if b.Copy != nil {
			if b.Role != "decode" || b.Copy.SourceWorker == b.Worker || len(b.Copy.Hashes) == 0 {
				t.Fatalf("bad copy in %s", body)
			}
			copies++
		}
	}
	if copies < 500 || copies > 1500 {
		t.Errorf("%d copies in 2000 decode bookings at rate 0.5", copies)
	}
	if len(finals) == 0 {
		t.Error("no session ended")
	}
}

func TestRunAgainstLoopbackServer(t *testing.T) {
	var mu sync.Mutex
	seen := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		mu.Lock()
		seen++
		n := seen
		mu.Unlock()
		if n%2 == 0 {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		w.Write([]byte(`{"message_id":"x","actions":[{"action_id":"a1"},{"action_id":"a2"}]}`))
	}))
	defer srv.Close()
	o := Options{Target: srv.URL, Rate: 2000, Duration: 500 * time.Millisecond, Connections: 4,
		Roles: []Role{{Name: "decode", Workers: []string{"d0"}}}, MaxTurns: 3, BlockSize: 16}
	res, err := Run(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	if res.Offered != 1000 || res.Completed != 1000 || res.Errors != 0 {
		t.Fatalf("offered %d completed %d errors %d (%s)", res.Offered, res.Completed, res.Errors, res.FirstError)
	}
	if res.Hints != 500 || res.Actions != 1000 {
		t.Errorf("hints %d actions %d; want 500 and 1000", res.Hints, res.Actions)
	}
	if res.Percentile(0.5) <= 0 || res.Percentile(1) < res.Percentile(0.5) {
		t.Errorf("percentiles p50 %s max %s", res.Percentile(0.5), res.Percentile(1))
	}
}

func TestRunCountsErrors(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "unknown role", http.StatusNotFound)
	}))
	defer srv.Close()
	o := Options{Target: srv.URL, Rate: 1000, Duration: 100 * time.Millisecond, Connections: 2,
		Roles: []Role{{Name: "decode", Workers: []string{"d0"}}}, MaxTurns: 3, BlockSize: 16}
	res, err := Run(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	if res.Errors != 100 || res.Completed != 0 || res.FirstError != "404 Not Found: unknown role" {
		t.Fatalf("errors %d completed %d first %q", res.Errors, res.Completed, res.FirstError)
	}
}
