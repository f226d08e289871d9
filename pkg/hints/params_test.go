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
		{name: "fraction for an integer", raw: `{"ttl_seconds": 1.5}`, errKey: "ttl_seconds", errWord: "invalid type: floating point `1.5`, expected i64"},
		{name: "a whole float for an integer, in Dynamo's words", raw: `{"ttl_seconds": 1.0}`, errKey: "ttl_seconds", errWord: "invalid type: floating point `1`, expected i64"},
		{name: "integer overflow", raw: `{"ttl_seconds": 1e40}`, errKey: "ttl_seconds", errWord: "floating point"},
		{name: "integer above the type's maximum, as written", raw: `{"ttl_seconds": 99999999999999999999}`, errKey: "ttl_seconds", errWord: "99999999999999999999 is out of range: at most 9223372036854775807"},
		{name: "integer below the type's minimum, as written", raw: `{"ttl_seconds": -9223372036854775809}`, errKey: "ttl_seconds", errWord: "-9223372036854775809 is out of range: at least -9223372036854775808"},
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
		{"-infinity", hints.FloatInRange("f", math.Inf(-1), 0, 1), `parameter "f": -Inf is not a finite number`},
		{"float below", hints.FloatInRange("f", -0.1, 0, 1), `parameter "f": -0.1 is out of range 0..1`},
		{"float at both bounds", errors.Join(hints.FloatInRange("f", 0, 0, 1), hints.FloatInRange("f", 1, 0, 1)), ""},
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

// nestedParams has the shapes a policy uses to tell a value that was set
// from one that was left out: pointers, and a nested mapping.
type nestedParams struct {
	Weight   *float64     `json:"weight,omitempty" params:"option"`
	Seed     *uint64      `json:"seed,omitempty"`
	Count    *int         `json:"count,omitempty"`
	Adaptive *innerParams `json:"adaptive,omitempty" params:"option"`
	Fixed    innerParams  `json:"fixed"`
}

type innerParams struct {
	IntervalMS *uint64  `json:"update_interval_ms,omitempty"`
	LoadScale  *float64 `json:"load_scale,omitempty"`
}

func ptr[T any](v T) *T { return &v }

func TestDecodeParamsPointersAndNesting(t *testing.T) {
	tests := []struct {
		name    string
		raw     string
		want    nestedParams
		errKey  string
		errWord string
	}{
		{name: "nothing set leaves every pointer nil", raw: `{}`},
		{name: "a float pointer", raw: `{"weight": 2.5}`, want: nestedParams{Weight: ptr(2.5)}},
		{name: "zero is set, not absent", raw: `{"weight": 0}`, want: nestedParams{Weight: ptr(0.0)}},
		{name: "the largest u64", raw: `{"seed": 18446744073709551615}`, want: nestedParams{Seed: ptr(uint64(1<<64 - 1))}},
		{name: "a negative u64", raw: `{"seed": -1}`, errKey: "seed", errWord: "-1 is not a non-negative integer"},
		{name: "a fractional u64", raw: `{"seed": 1.5}`, errKey: "seed", errWord: "invalid type: floating point `1.5`, expected u64"},
		{name: "a whole float for a u64", raw: `{"seed": 32.0}`, errKey: "seed", errWord: "invalid type: floating point `32`, expected u64"},
		{name: "the largest u64", raw: `{"seed": 18446744073709551615}`, want: nestedParams{Seed: ptr(uint64(18446744073709551615))}},
		{name: "u64 overflow", raw: `{"seed": 18446744073709551616}`, errKey: "seed", errWord: "18446744073709551616 is out of range: at most 18446744073709551615"},
		{name: "string for a float pointer names the pointee", raw: `{"weight": "2.5"}`, errKey: "weight", errWord: `"2.5" is not a number`},
		{name: "infinity for a float pointer", raw: `{"weight": 1e400}`, errKey: "weight", errWord: "1e400 is not a number"},
		{name: "string for an int pointer", raw: `{"count": "3"}`, errKey: "count", errWord: "is not an integer"},
		{name: "null for a pointer is unset, as Dynamo's Option reads it", raw: `{"weight": null}`, want: nestedParams{}},
		{name: "an empty nested mapping is set", raw: `{"adaptive": {}}`, want: nestedParams{Adaptive: &innerParams{}}},
		{name: "a nested mapping", raw: `{"adaptive": {"update_interval_ms": 250, "load_scale": 8}}`,
			want: nestedParams{Adaptive: &innerParams{IntervalMS: ptr(uint64(250)), LoadScale: ptr(8.0)}}},
		{name: "a nested struct value", raw: `{"fixed": {"load_scale": 2}}`, want: nestedParams{Fixed: innerParams{LoadScale: ptr(2.0)}}},
		{name: "an unknown nested key names its path", raw: `{"adaptive": {"load": 2}}`, errKey: "adaptive.load",
			errWord: "known: load_scale, update_interval_ms"},
		{name: "a wrong nested type names its path", raw: `{"adaptive": {"load_scale": true}}`, errKey: "adaptive.load_scale", errWord: "true is not a number"},
		{name: "a negative nested u64", raw: `{"fixed": {"update_interval_ms": -5}}`, errKey: "fixed.update_interval_ms", errWord: "a non-negative integer"},
		{name: "a number for a mapping", raw: `{"adaptive": 1}`, errKey: "adaptive", errWord: "1 is not a mapping"},
		{name: "a list for a mapping", raw: `{"adaptive": [1]}`, errKey: "adaptive", errWord: "is not a mapping"},
		{name: "null for an optional mapping is unset", raw: `{"adaptive": null}`, want: nestedParams{}},
		{name: "null for a pointer that is not an Option", raw: `{"seed": null}`, errKey: "seed", errWord: "leave the key out"},
		{name: "an unknown top-level key", raw: `{"temperature": 1}`, errKey: "temperature", errWord: "known: adaptive, count, fixed, seed, weight"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got nestedParams
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

// TestDecodeParamsRefusalKeepsDefaults: a refused value does not leave a
// half-decoded field behind.
func TestDecodeParamsRefusalKeepsDefaults(t *testing.T) {
	got := nestedParams{Weight: ptr(1.0)}
	if err := hints.DecodeParams(hints.Params(`{"weight": "x"}`), &got); err == nil {
		t.Fatal("a string for weight was accepted")
	}
	if got.Weight == nil || *got.Weight != 1 {
		t.Errorf("weight = %v after a refusal, want the default 1", got.Weight)
	}
}

func TestFloatAtLeast(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"at the minimum", hints.FloatAtLeast("w", 0, 0), ""},
		{"above", hints.FloatAtLeast("w", 1e300, 0), ""},
		{"below", hints.FloatAtLeast("w", -0.5, 0), `parameter "w": -0.5 is below the minimum 0`},
		{"just below one", hints.FloatAtLeast("r", 0.999, 1), `parameter "r": 0.999 is below the minimum 1`},
		{"NaN", hints.FloatAtLeast("w", math.NaN(), 0), `parameter "w": NaN is not a finite number`},
		{"+Inf", hints.FloatAtLeast("w", math.Inf(1), 0), `parameter "w": +Inf is not a finite number`},
		{"-Inf", hints.FloatAtLeast("w", math.Inf(-1), 0), `parameter "w": -Inf is not a finite number`},
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
