package dispatch_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kv-hint-operator/pkg/dispatch"
	"github.com/kvrouter/kv-hint-operator/pkg/hints"
	"github.com/kvrouter/kv-hint-operator/pkg/hints/builtin"
)

// domainWorker is a hint-capable worker that publishes its topology, as
// a Dynamo worker's ModelRuntimeConfig does.
type domainWorker struct {
	domains             map[string]string // topology_domains
	domain, enforcement string            // kv_transfer_domain, kv_transfer_enforcement
	weight              float64           // kv_transfer_preferred_weight
}

func (domainWorker) HintCapable() bool                 { return true }
func (domainWorker) InPool(string) bool                { return true }
func (domainWorker) SourceEndpoint(int) (string, bool) { return "", false }
func (domainWorker) Deliver([]byte, time.Time) bool    { return false }
func (w domainWorker) TopologyDomain(name string) (string, bool) {
	v, ok := w.domains[name]
	return v, ok
}
func (w domainWorker) KVTransferPolicy() (string, string, float64) {
	return w.domain, w.enforcement, w.weight
}

type domainWorkers map[string]dispatch.Worker

func (d domainWorkers) Lookup(id string) dispatch.Worker { return d[id] }

// TestKVTransferDomain: the dispatcher's rule for a booked worker that
// publishes a KV transfer domain, by enforcement and the source's value
// in that domain. A worker publishes several domains (zone and rack);
// only the booked worker's transfer domain is compared, and a source
// that shares another domain with it does not count.
func TestKVTransferDomain(t *testing.T) {
	zoneA := map[string]string{"zone": "us-east-1a", "rack": "rack-22"}
	workers := domainWorkers{
		"strict-zone-a":   domainWorker{domains: zoneA, domain: "zone", enforcement: dispatch.KVTransferRequired},
		"strict-rack-22":  domainWorker{domains: zoneA, domain: "rack", enforcement: dispatch.KVTransferRequired},
		"strict-no-value": domainWorker{domains: map[string]string{"rack": "rack-22"}, domain: "zone", enforcement: dispatch.KVTransferRequired},
		"loose-zone-a":    domainWorker{domains: zoneA, domain: "zone", enforcement: dispatch.KVTransferPreferred, weight: 0.85},
		// Sources: each publishes domains with no transfer policy of its own.
		"src-zone-a-rack-7":  domainWorker{domains: map[string]string{"zone": "us-east-1a", "rack": "rack-7"}},
		"src-zone-b-rack-22": domainWorker{domains: map[string]string{"zone": "us-east-1b", "rack": "rack-22"}},
		"src-rack-only":      domainWorker{domains: map[string]string{"rack": "rack-22"}},
		"plain":              dispatch.StaticWorkers{"plain": true}.Lookup("plain"),
	}
	d := dispatch.NewDispatcher(dispatch.Options{Catalog: builtin.NewCatalog(), Workers: workers})
	if err := d.Load([]byte("worker_selection:\n  decode:\n    type: kvcr\n    hints: [{type: kv-fetch}]\n"), "inline"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		worker, source string
		want           dispatch.CopyDrop
	}{
		{"strict-zone-a", "src-zone-a-rack-7", dispatch.CopyKept},               // same zone, another rack
		{"strict-zone-a", "src-zone-b-rack-22", dispatch.CopyDropOutsideDomain}, // same rack, another zone
		{"strict-zone-a", "src-rack-only", dispatch.CopyDropOutsideDomain},      // no zone at all
		{"strict-rack-22", "src-zone-b-rack-22", dispatch.CopyKept},
		{"strict-rack-22", "src-zone-a-rack-7", dispatch.CopyDropOutsideDomain},
		{"strict-zone-a", "plain", dispatch.CopyDropOutsideDomain},
		{"strict-zone-a", "gone", dispatch.CopyDropOutsideDomain},
		{"strict-zone-a", "", dispatch.CopyDropOutsideDomain},
		{"strict-no-value", "src-rack-only", dispatch.CopyDropOutsideDomain},
		{"loose-zone-a", "src-zone-b-rack-22", dispatch.CopyKept},
		{"plain", "src-zone-b-rack-22", dispatch.CopyKept},
	} {
		t.Run(tc.worker+"/"+tc.source, func(t *testing.T) {
			h, err := d.Build(context.Background(), &dispatch.Booking{RequestID: "r1", Role: "decode", Worker: tc.worker, BlockSize: 16,
				KVCopy: &hints.CommittedCopy{SourceWorker: tc.source, SourceEndpoint: "tcp://10.0.0.7:1", BlockHashes: []uint64{1, 2}}})
			if err != nil {
				t.Fatal(err)
			}
			if h.CopyDrop != tc.want || strings.Contains(string(h.Message), "kv.fetch") != (tc.want == dispatch.CopyKept) {
				t.Errorf("drop %v, message %s; want drop %v", h.CopyDrop, h.Message, tc.want)
			}
		})
	}
}
