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

// domainWorker is a hint-capable worker in a topology domain.
type domainWorker struct{ domain, enforcement string }

func (domainWorker) HintCapable() bool                    { return true }
func (domainWorker) InPool(string) bool                   { return true }
func (domainWorker) SourceEndpoint(int) (string, bool)    { return "", false }
func (domainWorker) Deliver([]byte, time.Time) bool       { return false }
func (w domainWorker) KVTransferDomain() (string, string) { return w.domain, w.enforcement }

type domainWorkers map[string]router.Worker

func (d domainWorkers) Lookup(id string) router.Worker { return d[id] }

// TestKVTransferDomain: the dispatcher's rule for a booked worker that
// publishes a topology domain, by enforcement and the source's domain.
func TestKVTransferDomain(t *testing.T) {
	workers := domainWorkers{
		"strict-a": domainWorker{"rack-a", router.KVTransferRequired},
		"loose-a":  domainWorker{"rack-a", router.KVTransferPreferred},
		"src-a":    domainWorker{"rack-a", ""},
		"src-b":    domainWorker{"rack-b", ""},
		"plain":    router.StaticWorkers{"plain": true}.Lookup("plain"),
	}
	d := router.NewDispatcher(router.Options{Catalog: builtin.NewCatalog(), Workers: workers})
	if err := d.Load([]byte("worker_selection:\n  decode:\n    type: kvcr\n    hints: [{type: kv-fetch}]\n"), "inline"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		worker, source string
		want           router.CopyDrop
	}{
		{"strict-a", "src-a", router.CopyKept},
		{"strict-a", "src-b", router.CopyDropOutsideDomain},
		{"strict-a", "plain", router.CopyDropOutsideDomain},
		{"strict-a", "gone", router.CopyDropOutsideDomain},
		{"strict-a", "", router.CopyDropOutsideDomain},
		{"loose-a", "src-b", router.CopyKept},
		{"plain", "src-b", router.CopyKept},
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
