package simworker

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

func action(n int, typ, payload string) string {
	return fmt.Sprintf(`{"action_id":"a%d","action_type":%q,"action_version":"1.0","payload":%s}`, n, typ, payload)
}

func msg(actions ...string) string {
	return `{"protocol_version":"0.1","message_id":"r1","actions":[` + strings.Join(actions, ",") + `]}`
}

func TestCheckMessage(t *testing.T) {
	fetch := `{"block_hashes":[18446744073709551615,1],"source_control_endpoint":"tcp://b:1"}`
	many := make([]string, 33)
	for i := range many {
		many[i] = action(i+1, "x.y", "{}")
	}
	for _, tc := range []struct {
		name, body, err string
	}{
		{"a good hint", msg(action(1, "kv.fetch", fetch), action(2, "kv.evict", `{"block_hashes":[]}`)), ""},
		{"wrong protocol", strings.Replace(msg(action(1, "x.y", "{}")), "0.1", "0.2", 1), "protocol_version"},
		{"no actions", msg(), "at least one action"},
		{"33 actions", msg(many...), "33 actions"},
		{"numbering gap", msg(action(1, "x.y", "{}"), action(3, "x.y", "{}")), `want "a2"`},
		{"payload not an object", msg(action(1, "x.y", "[]")), "JSON object"},
		{"empty fetch", msg(action(1, "kv.fetch", `{"block_hashes":[]}`)), "non-empty"},
		{"negative hash", msg(action(1, "kv.fetch", `{"block_hashes":[-1]}`)), "kv.fetch"},
		{"empty endpoint", msg(action(1, "kv.fetch", `{"block_hashes":[1],"source_control_endpoint":""}`)), "source_control_endpoint"},
		{"unknown envelope key", `{"protocol_version":"0.1","message_id":"r","actions":[],"extra":1}`, "unknown field"},
		{"trailing data", msg(action(1, "x.y", "{}")) + "{}", "after the message"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := CheckMessage([]byte(tc.body))
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("refused a good hint: %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("error %v, want one that says %q", err, tc.err)
			}
		})
	}
}

// TestWorkerRecords posts hints over HTTP and reads them back.
func TestWorkerRecords(t *testing.T) {
	s, err := Start(New(Options{ID: "w"}), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	good := msg(action(1, "kv.fetch", `{"block_hashes":[1]}`))
	for _, body := range []string{good, "{"} {
		resp, err := http.Post(s.HintEndpoint(), "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	got, err := s.WaitForHints(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || !bytes.Equal(got[0].Body, []byte(good)) || got[0].MessageID != "r1" {
		t.Errorf("recorded %+v, want the good hint only", got)
	}
	if s.Rejected() != 1 {
		t.Errorf("rejected %d, want 1", s.Rejected())
	}
}

func postHint(t *testing.T, url, body string) int {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestWorkerKeepsTheNewest: past MaxRecorded the oldest hints go first, in
// order, and every hint is still counted as accepted.
func TestWorkerKeepsTheNewest(t *testing.T) {
	s, err := Start(New(Options{ID: "w", MaxRecorded: 3}), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ids := func() []string {
		var out []string
		for _, h := range s.Hints() {
			out = append(out, h.MessageID)
		}
		return out
	}
	send := func(from, to int) {
		for i := from; i <= to; i++ {
			body := strings.Replace(msg(action(1, "x.y", "{}")), `"r1"`, fmt.Sprintf(`"m%d"`, i), 1)
			if st := postHint(t, s.HintEndpoint(), body); st != http.StatusOK {
				t.Fatalf("hint %d: status %d", i, st)
			}
		}
	}
	send(1, 2)
	if got := fmt.Sprint(ids()); got != "[m1 m2]" {
		t.Errorf("after 2: %s", got)
	}
	send(3, 7)
	if got := fmt.Sprint(ids()); got != "[m5 m6 m7]" {
		t.Errorf("after 7: %s, want the newest 3 oldest first", got)
	}
	if s.Accepted() != 7 {
		t.Errorf("accepted %d, want 7", s.Accepted())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if got, err := s.WaitForHints(ctx, 7); err != nil || len(got) != 3 {
		t.Errorf("WaitForHints(7) = %d hints, %v; want the 3 recorded", len(got), err)
	}
	s.Reset()
	if len(s.Hints()) != 0 || s.Accepted() != 0 {
		t.Fatalf("after Reset: %d hints, %d accepted", len(s.Hints()), s.Accepted())
	}
	send(8, 11)
	if got := fmt.Sprint(ids()); got != "[m9 m10 m11]" {
		t.Errorf("after Reset and 4 more: %s", got)
	}
}

// TestSinkWorker: a sink reads and counts every post, checks and records
// none, and still refuses a body over the limit.
func TestSinkWorker(t *testing.T) {
	s, err := Start(New(Options{ID: "w", Sink: true}), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { _, err := s.WaitForHints(ctx, 3); done <- err }()
	for _, body := range []string{msg(action(1, "kv.fetch", `{"block_hashes":[1]}`)), "{", strings.Repeat("x", 100<<10)} {
		if st := postHint(t, s.HintEndpoint(), body); st != http.StatusNoContent {
			t.Fatalf("status %d, want 204", st)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if st := postHint(t, s.HintEndpoint(), strings.Repeat("x", maxHintBytes+1)); st != http.StatusBadRequest {
		t.Errorf("oversize body: status %d, want 400", st)
	}
	if s.Accepted() != 3 || s.Rejected() != 1 || len(s.Hints()) != 0 {
		t.Errorf("accepted %d rejected %d recorded %d; want 3, 1, 0", s.Accepted(), s.Rejected(), len(s.Hints()))
	}
	resp, err := http.Get(s.URL + "/hints")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got struct {
		Accepted int  `json:"accepted"`
		Sink     bool `json:"sink"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	if got.Accepted != 3 || !got.Sink {
		t.Errorf("GET /hints: %+v", got)
	}
}
