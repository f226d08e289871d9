package sidecar

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kvrouter/kv-hint-operator/internal/preview"
	"github.com/kvrouter/kv-hint-operator/internal/sidecar/record"
	"github.com/kvrouter/kv-hint-operator/pkg/hints/builtin"
)

const recordConfig = `worker_selection:
  prefill:
    type: dynamo-default-cost-fn
    hints: []
  decode:
    type: kvcr
    hints:
      - type: kv-fetch
        parameters: {min_blocks: 2}
      - type: kv-retain
        parameters: {min_prompt_tokens: 100}
      - type: kv-evict
`

// Bookings recorded through the sidecar over real HTTP replay into
// preview as they are: under the config the sidecar ran, the actions the
// model assigns to each recorded booking are the ones the sidecar
// answered. The recording keeps no session ID, request ID, block hash or
// endpoint as given, only their sharing structure.
func TestRecordThenPreview(t *testing.T) {
	path := filepath.Join(t.TempDir(), "trace.jsonl")
	s := startSidecarWithConfig(t, builtin.NewCatalog(), recordConfig, func(o *Options) {
		o.Record = &record.Options{Path: path, SampleRate: 1}
	})
	for _, id := range []string{"pre-1", "dec-1", "dec-2"} {
		registerWorker(t, s, startWorker(t, id))
	}
	var answered [][]string
	const n = 24
	for i := range n {
		sess := fmt.Sprintf("chat-%d", i%4)
		turn := i/4 + 1
		final := turn == n/4
		req := fmt.Sprintf("req-%d", i)
		prompt := 50 + 40*i
		bodies := []string{
			fmt.Sprintf(`{"request_id":%q,"role":"prefill","worker":"pre-1","prompt_tokens":%d,"block_size":16,"session":{"id":%q,"turn":%d,"final":%t}}`,
				req, prompt, sess, turn, final),
		}
		copyJSON := ""
		switch i % 3 {
		case 0: // a copy big enough to fetch, from a source the booking names
			copyJSON = fmt.Sprintf(`,"committed_kv_copy":{"source_worker":"pre-1","source_endpoint":"tcp://127.0.0.1:23280","block_hashes":[%d,%d,%d]}`, 1000+i, 1001+i, 1002+i)
		case 1: // a copy under min_blocks
			copyJSON = fmt.Sprintf(`,"committed_kv_copy":{"source_worker":"pre-1","source_endpoint":"tcp://127.0.0.1:23280","block_hashes":[%d]}`, 1000+i)
		}
		bodies = append(bodies, fmt.Sprintf(`{"request_id":%q,"role":"decode","worker":"dec-%d","prompt_tokens":%d,"block_size":16,"session":{"id":%q,"turn":%d,"final":%t}%s}`,
			req, 1+i%2, prompt, sess, turn, final, copyJSON))
		for _, body := range bodies {
			r := post(t, s, "/v1/bookings", body)
			var types []string
			switch r.status {
			case http.StatusNoContent:
			case http.StatusOK:
				var m struct {
					Actions []struct {
						Type string `json:"action_type"`
					} `json:"actions"`
				}
				if err := json.Unmarshal([]byte(r.body), &m); err != nil {
					t.Fatal(err)
				}
				for _, a := range m.Actions {
					types = append(types, a.Type)
				}
			default:
				t.Fatalf("booking %s: %d %s", body, r.status, r.body)
			}
			answered = append(answered, types)
		}
	}
	if err := s.recorder.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{"chat-", "req-", "127.0.0.1"} {
		if strings.Contains(string(data), secret) {
			t.Errorf("the recorded trace holds %q as given", secret)
		}
	}

	rows, err := preview.ReadTrace(strings.NewReader(string(data)), 16)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != len(answered) {
		t.Fatalf("%d rows recorded, %d bookings answered", len(rows), len(answered))
	}
	copies := 0
	for _, r := range rows {
		if r.Copy == nil {
			continue
		}
		copies++
		for _, h := range r.Copy.BlockHashes {
			if h >= 1000 && h < 1100 {
				t.Errorf("line %d: block hash %d is kept as given", r.Line, h)
			}
		}
	}
	if copies == 0 {
		t.Fatal("no copy was recorded")
	}
	a := preview.DefaultAssumptions()
	a.BlockSize = 16
	a.RecordedChoices = true
	res, err := preview.Replay(builtin.NewCatalog(), preview.Config{Name: "recorded", Doc: []byte(recordConfig)}, rows, a)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]bool{}
	for i, b := range res.Bookings {
		var types []string
		for _, act := range b.Actions {
			types = append(types, strings.SplitN(act, "(", 2)[0])
			kinds[types[len(types)-1]] = true
		}
		if !slices.Equal(types, answered[i]) {
			t.Errorf("booking %d (%s %s on %s): the model assigns %v; the sidecar answered %v", i, b.RequestID, b.Role, b.Worker, types, answered[i])
		}
		if !slices.Equal(rows[i].Actions, answered[i]) && !(len(rows[i].Actions) == 0 && len(answered[i]) == 0) {
			t.Errorf("booking %d: recorded actions %v, answered %v", i, rows[i].Actions, answered[i])
		}
	}
	for _, k := range []string{"kv.fetch", "kv.retain", "kv.evict"} {
		if !kinds[k] {
			t.Errorf("no booking got %s: the test does not cover it", k)
		}
	}
}
