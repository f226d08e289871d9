package bookingapi_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kvrouter/kv-hint-operator/pkg/bookingapi"
)

// TestClientAnswersAndOutcomes runs the client against a real HTTP server
// on loopback that answers as a sidecar does: the config hash on 200 and
// 204 booking answers, 204 to an outcome it keeps, 400 to one it refuses.
func TestClientAnswersAndOutcomes(t *testing.T) {
	var got []bookingapi.Outcome
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		switch r.URL.Path {
		case bookingapi.Path:
			var b bookingapi.Booking
			if err := json.Unmarshal(body, &b); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			w.Header().Set(bookingapi.HeaderConfigHash, "00112233445566"+b.Role[:2])
			if b.Role == "decode" {
				w.WriteHeader(http.StatusNoContent)
				return
			}
			w.Write([]byte(`{"message_id":"` + b.RequestID + `"}`))
		case bookingapi.OutcomesPath:
			var o bookingapi.Outcome
			if err := json.Unmarshal(body, &o); err != nil || o.ConfigHash == "" {
				http.Error(w, `{"error":"config_hash is required"}`, http.StatusBadRequest)
				return
			}
			got = append(got, o)
			w.WriteHeader(http.StatusNoContent)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	c, err := bookingapi.NewClient(srv.URL, 0)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	a, err := c.BookAnswer(ctx, &bookingapi.Booking{RequestID: "r1", Role: "prefill", Worker: "w1", PromptTokens: 64, BlockSize: 16})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(bookingapi.Answer{Message: []byte(`{"message_id":"r1"}`), ConfigHash: "00112233445566pr"}, a); diff != "" {
		t.Errorf("hinted answer (-want +got):\n%s", diff)
	}
	a, err = c.BookAnswer(ctx, &bookingapi.Booking{RequestID: "r2", Role: "decode", Worker: "w1", PromptTokens: 64, BlockSize: 16})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(bookingapi.Answer{ConfigHash: "00112233445566de"}, a); diff != "" {
		t.Errorf("answer without a hint (-want +got):\n%s", diff)
	}

	o := bookingapi.Outcome{RequestID: "r1", Role: "prefill", Worker: "w1", ConfigHash: a.ConfigHash, PromptTokens: 64, CachedTokens: 48, TTFTSeconds: 0.012, HintRejected: true}
	if err := c.ReportOutcome(ctx, &o); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]bookingapi.Outcome{o}, got); diff != "" {
		t.Errorf("outcomes the server read (-want +got):\n%s", diff)
	}
	err = c.ReportOutcome(ctx, &bookingapi.Outcome{Role: "prefill", PromptTokens: 1})
	if err == nil || !strings.Contains(err.Error(), "400") || !strings.Contains(err.Error(), "config_hash is required") {
		t.Errorf("refused outcome: got error %v, want the 400 and the server's message", err)
	}
}
