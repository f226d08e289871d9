package dispatch_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kvrouter/kv-hint-operator/pkg/dispatch"
)

const testHint = `{"protocol_version":"0.1","message_id":"r1","actions":[{"action_id":"a1","action_type":"kv.fetch","action_version":"1.0","payload":{"block_hashes":[11,22],"source_control_endpoint":"tcp://10.0.0.7:23280"}}]}`

func TestCarryHint(t *testing.T) {
	h := testHint
	for _, tc := range []struct {
		name string
		body string
		path dispatch.InBandPath
		want string
		err  string // a substring of the error; "" for none
	}{
		{
			name: "kv_hint added with kv_transfer_params, after the last field",
			body: `{"model":"llama","prompt":"hi","max_tokens":8}`,
			want: `{"model":"llama","prompt":"hi","max_tokens":8,"kv_transfer_params":{"kv_hint":` + h + `}}`,
		},
		{
			name: "kv_hint beside a prefill/decode handshake",
			body: `{"kv_transfer_params":{"do_remote_prefill":true,"remote_block_ids":[1, 2]},"model":"m"}`,
			want: `{"kv_transfer_params":{"do_remote_prefill":true,"remote_block_ids":[1, 2],"kv_hint":` + h + `},"model":"m"}`,
		},
		{
			name: "kv_hint replaced",
			body: `{"kv_transfer_params":{"kv_hint":{"old":true},"x":1}}`,
			want: `{"kv_transfer_params":{"kv_hint":` + h + `,"x":1}}`,
		},
		{
			name: "kv_transfer_params null counts as absent",
			body: `{"a":1,"kv_transfer_params":null,"b":2}`,
			want: `{"a":1,"kv_transfer_params":{"kv_hint":` + h + `},"b":2}`,
		},
		{
			name: "empty kv_transfer_params",
			body: `{"kv_transfer_params":{ }}`,
			want: `{"kv_transfer_params":{"kv_hint":` + h + ` }}`,
		},
		{
			name: "empty body object",
			body: ` { } `,
			want: ` {"kv_transfer_params":{"kv_hint":` + h + `} } `,
		},
		{
			name: "whitespace and escapes of other fields kept byte for byte",
			body: "{\n  \"prompt\": \"a \\\"q\\\" \\u00e9 }\",\n  \"n\": 1.50e3 ,\n  \"stop\": [ \"}\" ]\n}\n",
			want: "{\n  \"prompt\": \"a \\\"q\\\" \\u00e9 }\",\n  \"n\": 1.50e3 ,\n  \"stop\": [ \"}\" ],\"kv_transfer_params\":{\"kv_hint\":" + h + "}\n}\n",
		},
		{
			name: "top-level kv_hints added",
			path: dispatch.InBandKVHints,
			body: `{"model":"m","kv_transfer_params":{"do_remote_decode":true}}`,
			want: `{"model":"m","kv_transfer_params":{"do_remote_decode":true},"kv_hints":` + h + `}`,
		},
		{
			name: "top-level kv_hints replaced in its place",
			path: dispatch.InBandKVHints,
			body: `{"kv_hints":null,"model":"m"}`,
			want: `{"kv_hints":` + h + `,"model":"m"}`,
		},
		{
			name: "legacy router_hint",
			path: dispatch.InBandRouterHint,
			body: `{"kv_transfer_params":{"kv_hint":1}}`,
			want: `{"kv_transfer_params":{"kv_hint":1,"router_hint":` + h + `}}`,
		},
		{
			name: "an escaped key names the same field",
			body: `{"kv\u005ftransfer_params":{"a":1}}`,
			want: `{"kv\u005ftransfer_params":{"a":1,"kv_hint":` + h + `}}`,
		},
		{
			name: "of a repeated field, the last is the one replaced",
			path: dispatch.InBandKVHints,
			body: `{"kv_hints":1,"kv_hints":2}`,
			want: `{"kv_hints":1,"kv_hints":` + h + `}`,
		},
		{
			name: "a field of another case is another field",
			path: dispatch.InBandKVHints,
			body: `{"KV_HINTS":1}`,
			want: `{"KV_HINTS":1,"kv_hints":` + h + `}`,
		},
		{name: "body an array", body: `[{"a":1}]`, err: "request body: not a JSON object, got an array"},
		{name: "body null", body: `null`, err: "request body: not a JSON object, got null"},
		{name: "body not JSON", body: `{"a":`, err: "request body: invalid JSON"},
		{name: "body empty", body: ``, err: "request body: empty"},
		{name: "kv_transfer_params an array", body: `{"kv_transfer_params":[]}`, err: "kv_transfer_params: not a JSON object, got an array"},
		{name: "kv_transfer_params a string", path: dispatch.InBandRouterHint, body: `{"kv_transfer_params":"x"}`, err: "kv_transfer_params: not a JSON object, got a string"},
		{name: "kv_hints ignores kv_transfer_params", path: dispatch.InBandKVHints, body: `{"kv_transfer_params":7}`,
			want: `{"kv_transfer_params":7,"kv_hints":` + h + `}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := []byte(tc.body)
			got, err := dispatch.CarryHint(body, []byte(h), tc.path)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, string(got)); diff != "" {
				t.Errorf("body (-want +got):\n%s", diff)
			}
			if string(body) != tc.body {
				t.Errorf("the caller's body was changed: %s", body)
			}
		})
	}
}

func TestCarryHintMessage(t *testing.T) {
	for _, tc := range []struct {
		name, msg, want, err string
	}{
		{name: "surrounding whitespace dropped", msg: "\n" + testHint + "\r\n", want: `{"kv_hints":` + testHint + `}`},
		{name: "empty", msg: " ", err: "hint message is empty"},
		{name: "not JSON", msg: `{"a"`, err: "hint message: invalid JSON"},
		{name: "not an object", msg: `[1]`, err: "hint message: not a JSON object, got an array"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := dispatch.CarryHint([]byte(`{}`), []byte(tc.msg), dispatch.InBandKVHints)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				if tc.err != "hint message is empty" && tc.err != "hint message: invalid JSON" && !errors.Is(err, dispatch.ErrNotObject) {
					t.Errorf("error %v does not wrap ErrNotObject", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, string(got)); diff != "" {
				t.Errorf("body (-want +got):\n%s", diff)
			}
		})
	}
}

func TestInBandPathNames(t *testing.T) {
	for _, p := range []dispatch.InBandPath{dispatch.InBandKVHint, dispatch.InBandKVHints, dispatch.InBandRouterHint} {
		got, err := dispatch.ParseInBandPath(p.String())
		if err != nil || got != p {
			t.Errorf("ParseInBandPath(%q) = %v, %v", p.String(), got, err)
		}
		text, err := p.MarshalText()
		if err != nil || string(text) != p.String() {
			t.Errorf("MarshalText(%v) = %s, %v", p, text, err)
		}
	}
	var zero dispatch.InBandPath
	if zero != dispatch.InBandKVHint {
		t.Errorf("the zero path is %v, want kv_transfer_params.kv_hint", zero)
	}
	if _, err := dispatch.ParseInBandPath("kv_hint"); err == nil || !strings.Contains(err.Error(), "kv_transfer_params.kv_hint") {
		t.Errorf("an unknown name: %v, want an error that lists the known ones", err)
	}
	if _, err := dispatch.CarryHint([]byte(`{}`), []byte(testHint), dispatch.InBandPath(9)); err == nil {
		t.Error("an unknown path was accepted")
	}

	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	p := dispatch.InBandKVHint
	fs.Var(&p, "hint-path", "")
	if err := fs.Parse([]string{"--hint-path", "kv_hints"}); err != nil || p != dispatch.InBandKVHints {
		t.Errorf("flag: %v, %v", p, err)
	}
	if err := fs.Parse([]string{"--hint-path", "x"}); err == nil {
		t.Error("flag took an unknown path")
	}
	var cfg struct {
		Path dispatch.InBandPath `json:"path"`
	}
	if err := json.Unmarshal([]byte(`{"path":"kv_transfer_params.router_hint"}`), &cfg); err != nil || cfg.Path != dispatch.InBandRouterHint {
		t.Errorf("JSON: %v, %v", cfg.Path, err)
	}
}

// FuzzCarryHint checks the hand-written splice against encoding/json: the
// result decodes to the body with the message set at the path, every
// other top-level field keeps its raw bytes and its place, and exactly the
// bodies encoding/json reads as something other than an object (or with a
// kv_transfer_params neither an object nor null) are refused.
func FuzzCarryHint(f *testing.F) {
	for _, s := range []string{
		`{}`, `{"model":"m","prompt":"p"}`, `{"kv_transfer_params":{"do_remote_prefill":true}}`,
		`{"kv_transfer_params":null}`, `{"kv_transfer_params":[]}`, `{"kv_hints":{"x":[1,{"y":"}"}]}}`,
		` {"a" : "\"}" , "kv_transfer_params" : { "kv_hint" : 1 , "router_hint" : [ ] } } `,
		`{"kv\u005fhints":1,"kv_hints":2}`, `[]`, `null`, `"x"`, `{"a":1`,
	} {
		for p := range 3 {
			f.Add([]byte(s), uint8(p))
		}
	}
	msg := []byte(testHint)
	var msgValue any
	if err := json.Unmarshal(msg, &msgValue); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body []byte, p uint8) {
		path := dispatch.InBandPath(p % 3)
		orig := bytes.Clone(body)
		got, err := dispatch.CarryHint(body, msg, path)
		if !bytes.Equal(body, orig) {
			t.Fatal("the caller's body was changed")
		}
		var ref any
		if json.Unmarshal(body, &ref) != nil {
			if err == nil {
				t.Fatalf("invalid JSON %q accepted", body)
			}
			return
		}
		obj, isObj := ref.(map[string]any)
		parent, key, nested := strings.Cut(path.String(), ".")
		var params map[string]any
		paramsOK := true
		if nested {
			switch v := obj[parent].(type) {
			case nil:
				params = map[string]any{}
			case map[string]any:
				params = v
			default:
				paramsOK = false
			}
		}
		if !isObj || !paramsOK {
			if err == nil {
				t.Fatalf("%q accepted for %v: %s", body, path, got)
			}
			return
		}
		if err != nil {
			t.Fatalf("%q refused for %v: %v", body, path, err)
		}
		if nested {
			params[key] = msgValue
			obj[parent] = params
		} else {
			obj[parent] = msgValue
		}
		var out any
		if err := json.Unmarshal(got, &out); err != nil {
			t.Fatalf("result is not JSON: %v\n%s", err, got)
		}
		if diff := cmp.Diff(obj, out); diff != "" {
			t.Fatalf("body %q, path %v: result differs from encoding/json's (-want +got):\n%s", body, path, diff)
		}

		// Every member but the one at the path keeps its raw bytes and
		// its place; a new member comes last.
		before, after := members(t, body), members(t, got)
		last := -1
		for i, m := range before {
			if m.key == parent {
				last = i
			}
		}
		want := before
		if last < 0 {
			want = append(want, after[len(after)-1])
		} else {
			want = append([]member(nil), before...)
			want[last] = after[last]
		}
		if diff := cmp.Diff(want, after, cmp.AllowUnexported(member{})); diff != "" {
			t.Fatalf("members moved or changed (-want +got):\n%s", diff)
		}
	})
}

type member struct {
	key string
	raw string
}

// members lists an object's top-level members in order, with their values'
// raw bytes, as encoding/json's decoder reads them.
func members(t *testing.T, b []byte) []member {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	if _, err := dec.Token(); err != nil {
		t.Fatal(err)
	}
	var out []member
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			t.Fatal(err)
		}
		out = append(out, member{key: k.(string), raw: string(raw)})
	}
	return out
}

// BenchmarkCarryHint carries a realistic hint (a kv.fetch of 64 blocks, a
// kv.retain and a kv.evict) on chat completion bodies of about 4 KiB and
// 256 KiB that already carry a prefill/decode handshake.
func BenchmarkCarryHint(b *testing.B) {
	msg := benchHint()
	for _, size := range []int{4 << 10, 256 << 10} {
		body := chatBody(size)
		for _, path := range []dispatch.InBandPath{dispatch.InBandKVHint, dispatch.InBandKVHints} {
			b.Run(fmt.Sprintf("%dKiB/%s", size>>10, path), func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(len(body)))
				for b.Loop() {
					if _, err := dispatch.CarryHint(body, msg, path); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// benchHint is a hint with three actions and 64 twenty-digit block hashes.
func benchHint() []byte {
	var hashes strings.Builder
	for i := range 64 {
		if i > 0 {
			hashes.WriteByte(',')
		}
		fmt.Fprintf(&hashes, "%d", uint64(1)<<63+uint64(i)*0x9e3779b97f4a7c15%(1<<62))
	}
	return []byte(`{"protocol_version":"0.1","message_id":"chatcmpl-6f1c2a9e-5b0d-4d4e-9a57-1d2c3b4a5f60","actions":[` +
		`{"action_id":"a1","action_type":"kv.fetch","action_version":"1.0","payload":{"block_hashes":[` + hashes.String() + `],"source_control_endpoint":"tcp://10.0.0.7:23280"}},` +
		`{"action_id":"a2","action_type":"kv.retain","action_version":"1.0","payload":{"block_hashes":[],"execute_at":"request_completion","include_current_request":true,"priority":50,"ttl_seconds":300.0}},` +
		`{"action_id":"a3","action_type":"kv.evict","action_version":"1.0","payload":{"block_hashes":[],"execute_at":"request_completion","include_current_request":true}}]}`)
}

// chatBody is an OpenAI chat completion request of about size bytes: a
// system prompt, turns of a conversation with escapes in them, sampling
// fields and kv_transfer_params from a prefill worker.
func chatBody(size int) []byte {
	var msgs strings.Builder
	turn := `{"role":"user","content":"Summarise the \"quarterly\" report:\nrevenue rose 12%, costs fell.\tThanks!"},` +
		`{"role":"assistant","content":"Revenue grew by twelve percent while costs went down; margins widened."},`
	for msgs.Len() < size-600 {
		msgs.WriteString(turn)
	}
	return []byte(`{"model":"meta-llama/Llama-3.1-8B-Instruct","messages":[{"role":"system","content":"You are a helpful assistant."},` +
		msgs.String() + `{"role":"user","content":"And next quarter?"}],` +
		`"max_tokens":256,"temperature":0.7,"top_p":0.95,"stream":false,"stop":["\n\n"],"user":"u-1234",` +
		`"kv_transfer_params":{"do_remote_prefill":true,"do_remote_decode":false,"remote_engine_id":"prefill-0","remote_host":"10.0.0.5","remote_port":5600,"remote_block_ids":[1,2,3,4,5,6,7,8]}}`)
}
