package simworker

import (
	"bytes"
	"context"
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
