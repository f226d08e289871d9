package router_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kv-hint-operator/pkg/hints"
	"github.com/kvrouter/kv-hint-operator/pkg/hints/builtin"
	"github.com/kvrouter/kv-hint-operator/pkg/router"
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

type domainWorkers map[string]router.Worker

func (d domainWorkers) Lookup(id string) router.Worker { return d[id] }

// TestKVTransferDomain: the dispatcher's rule for a booked worker that
// publishes a KV transfer domain, by enforcement and the source's value
// in that domain. A worker publishes several domains (zone and rack);
// only the booked worker's transfer domain is compared, and a source
// that shares another domain with it does not count.
func TestKVTransferDomain(t *testing.T) {
	zoneA := map[string]string{"zone": "us-east-1a", "rack": "rack-22"}
	workers := domainWorkers{
		"strict-zone-a":   domainWorker{domains: zoneA, domain: "zone", enforcement: router.KVTransferRequired},
		"strict-rack-22":  domainWorker{domains: zoneA, domain: "rack", enforcement: router.KVTransferRequired},
		"strict-no-value": domainWorker{domains: map[string]string{"rack": "rack-22"}, domain: "zone", enforcement: router.KVTransferRequired},
		"loose-zone-a":    domainWorker{domains: zoneA, domain: "zone", enforcement: router.KVTransferPreferred, weight: 0.85},
		// Sources: each publishes domains with no transfer policy of its own.
		"src-zone-a-rack-7":  domainWorker{domains: map[string]string{"zone": "us-east-1a", "rack": "rack-7"}},
		"src-zone-b-rack-22": domainWorker{domains: map[string]string{"zone": "us-east-1b", "rack": "rack-22"}},
		"src-rack-only":      domainWorker{domains: map[string]string{"rack": "rack-22"}},
		"plain":              router.StaticWorkers{"plain": true}.Lookup("plain"),
	}
	d := router.NewDispatcher(router.Options{Catalog: builtin.NewCatalog(), Workers: workers})
	if err := d.Load([]byte("worker_selection:\n  decode:\n    type: kvcr\n    hints: [{type: kv-fetch}]\n"), "inline"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		worker, source string
		want           router.CopyDrop
	}{
		{"strict-zone-a", "src-zone-a-rack-7", router.CopyKept},               // same zone, another rack
		{"strict-zone-a", "src-zone-b-rack-22", router.CopyDropOutsideDomain}, // same rack, another zone
		{"strict-zone-a", "src-rack-only", router.CopyDropOutsideDomain},      // no zone at all
		{"strict-rack-22", "src-zone-b-rack-22", router.CopyKept},
		{"strict-rack-22", "src-zone-a-rack-7", router.CopyDropOutsideDomain},
		{"strict-zone-a", "plain", router.CopyDropOutsideDomain},
		{"strict-zone-a", "gone", router.CopyDropOutsideDomain},
		{"strict-zone-a", "", router.CopyDropOutsideDomain},
		{"strict-no-value", "src-rack-only", router.CopyDropOutsideDomain},
		{"loose-zone-a", "src-zone-b-rack-22", router.CopyKept},
		{"plain", "src-zone-b-rack-22", router.CopyKept},
	} {
		t.Run(tc.worker+"/"+tc.source, func(t *testing.T) {
			h, err := d.Build(context.Background(), &router.Booking{RequestID: "r1", Role: "decode", Worker: tc.worker, BlockSize: 16,
				KVCopy: &hints.CommittedCopy{SourceWorker: tc.source, SourceEndpoint: "tcp://10.0.0.7:1", BlockHashes: []uint64{1, 2}}})
			if err != nil {
				t.Fatal(err)
			}
			if h.CopyDrop != tc.want || strings.Contains(string(h.Message), "kv.fetch") != (tc.want == router.CopyKept) {
				t.Errorf("drop %v, message %s; want drop %v", h.CopyDrop, h.Message, tc.want)
			}
		})
	}
}
