package dispatch_test

import (
	"context"
	"fmt"

	"github.com/kvrouter/kv-hint-operator/pkg/dispatch"
	"github.com/kvrouter/kv-hint-operator/pkg/hints"
	"github.com/kvrouter/kv-hint-operator/pkg/hints/builtin"
)

// A Go router links the dispatcher, loads the hints config the operator
// compiles, and builds the hint for every worker it books.
func ExampleDispatcher_Build() {
	d := dispatch.NewDispatcher(dispatch.Options{
		Catalog: builtin.NewCatalog(),
		Workers: dispatch.StaticWorkers{"decode-0": true, "decode-1": false},
	})
	if err := d.Load([]byte("worker_selection:\n  decode: kvcr\n"), "hints.yaml"); err != nil {
		panic(err)
	}
	h, err := d.Build(context.Background(), &dispatch.Booking{
		RequestID: "r1", Role: "decode", Worker: "decode-0", PromptTokens: 512, BlockSize: 16,
		KVCopy: &hints.CommittedCopy{SourceWorker: "decode-1", SourceEndpoint: "tcp://10.0.0.7:23280", BlockHashes: []uint64{11, 22}},
	})
	fmt.Println(h.Outcome, err)
	fmt.Println(string(h.Message))

	h, _ = d.Build(context.Background(), &dispatch.Booking{RequestID: "r2", Role: "decode", Worker: "decode-1"})
	fmt.Println(h.Outcome)
	// Output:
	// hinted <nil>
	// {"protocol_version":"0.1","message_id":"r1","actions":[{"action_id":"a1","action_type":"kv.fetch","action_version":"1.0","payload":{"block_hashes":[11,22],"source_control_endpoint":"tcp://10.0.0.7:23280"}}]}
	// not_hint_capable
}

// A router carries the hint a booking answered on the request it forwards
// to the booked worker: Dynamo's vLLM handler reads it at
// kv_transfer_params.kv_hint, beside the transfer parameters the request
// already carries.
func ExampleCarryHint() {
	body := []byte(`{"model":"llama","prompt":"Hello","kv_transfer_params":{"do_remote_prefill":true}}`)
	hint := []byte(`{"protocol_version":"0.1","message_id":"r1","actions":[{"action_id":"a1","action_type":"kv.evict","action_version":"1.0","payload":{"block_hashes":[]}}]}`)

	out, err := dispatch.CarryHint(body, hint, dispatch.InBandKVHint)
	fmt.Println(string(out), err)

	// The vLLM and SGLang proposals read a top-level kv_hints instead.
	path, _ := dispatch.ParseInBandPath("kv_hints")
	out, _ = dispatch.CarryHint([]byte(`{"model":"llama","prompt":"Hello"}`), hint, path)
	fmt.Println(string(out))

	_, err = dispatch.CarryHint([]byte(`{"kv_transfer_params":[1]}`), hint, dispatch.InBandKVHint)
	fmt.Println(err)
	// Output:
	// {"model":"llama","prompt":"Hello","kv_transfer_params":{"do_remote_prefill":true,"kv_hint":{"protocol_version":"0.1","message_id":"r1","actions":[{"action_id":"a1","action_type":"kv.evict","action_version":"1.0","payload":{"block_hashes":[]}}]}}} <nil>
	// {"model":"llama","prompt":"Hello","kv_hints":{"protocol_version":"0.1","message_id":"r1","actions":[{"action_id":"a1","action_type":"kv.evict","action_version":"1.0","payload":{"block_hashes":[]}}]}}
	// request body: kv_transfer_params: not a JSON object, got an array
}
