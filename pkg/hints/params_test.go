package hints_test

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kvrouter/kv-hint-operator/pkg/hints"
)

type sampleParams struct {
	TTL     int     `json:"ttl_seconds"`
	Weight  float64 `json:"weight"`
	Label   string  `json:"label"`
	Enabled bool    `json:"enabled"`
}

func TestDecodeParams(t *testing.T) {
	defaults := sampleParams{TTL: 300, Weight: 1}
	tests := []struct {
		name    string
		raw     string
		want    sampleParams
		errKey  string
		errWord string
	}{
		{name: "absent keeps defaults", raw: "", want: defaults},
		{name: "null keeps defaults", raw: "null", want: defaults},
		{name: "empty mapping keeps defaults", raw: "{}", want: defaults},
		{name: "values override", raw: `{"ttl_seconds": 60, "label": "x", "enabled": true}`, want: sampleParams{TTL: 60, Weight: 1, Label: "x", Enabled: true}},
		{name: "unknown key", raw: `{"ttl": 60}`, errKey: "ttl", errWord: "known: enabled, label, ttl_seconds, weight"},
		{name: "string for an integer", raw: `{"ttl_seconds": "60"}`, errKey: "ttl_seconds", errWord: "an integer"},
		{name: "fraction for an integer", raw: `{"ttl_seconds": 1.5}`, errKey: "ttl_seconds", errWord: "an integer"},
		{name: "integer overflow", raw: `{"ttl_seconds": 1e40}`, errKey: "ttl_seconds", errWord: "an integer"},
		{name: "list for a number", raw: `{"weight": [1]}`, errKey: "weight", errWord: "a number"},
		{name: "null value", raw: `{"weight": null}`, errKey: "weight", errWord: "leave the key out"},
		{name: "not a mapping", raw: `[1, 2]`, errWord: "must be a mapping"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := defaults
			err := hints.DecodeParams(hints.Params(tt.raw), &got)
			if tt.errWord == "" {
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(tt.want, got); diff != "" {
					t.Errorf("decoded (-want +got):\n%s", diff)
				}
				return
			}
			var pe *hints.ParamError
			if !errors.As(err, &pe) {
				t.Fatalf("err = %v; want a *ParamError", err)
			}
			if pe.Key != tt.errKey || !strings.Contains(pe.Error(), tt.errWord) {
				t.Errorf("err = %q (key %q); want key %q and %q", pe.Error(), pe.Key, tt.errKey, tt.errWord)
			}
		})
	}
}

func TestRanges(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"int in range", hints.IntInRange("k", 5, 1, 10), ""},
		{"int below", hints.IntInRange("k", 0, 1, 10), `parameter "k": 0 is out of range 1..10`},
		{"int above", hints.IntInRange("k", 11, 1, 10), `parameter "k": 11 is out of range 1..10`},
		{"float in range", hints.FloatInRange("f", 0.5, 0, 1), ""},
		{"float above", hints.FloatInRange("f", 1.5, 0, 1), `parameter "f": 1.5 is out of range 0..1`},
		{"NaN", hints.FloatInRange("f", math.NaN(), 0, 1), `parameter "f": NaN is not a finite number`},
		{"infinity", hints.FloatInRange("f", math.Inf(1), 0, 1), `parameter "f": +Inf is not a finite number`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ""
			if tt.err != nil {
				got = tt.err.Error()
			}
			if got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}
