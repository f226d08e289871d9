package delivery

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/kvrouter/kv-hint-operator/internal/dev/simworker"
	"github.com/kvrouter/kv-hint-operator/internal/testing/testenv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestConnBudget: with a budget of 4 connections and 8 workers, each
// hinted in turn, the open connections never pass 4, and every hint is
// sent: past three quarters of the budget a poster gives its connection
// back after each post, and a dial that finds none left sweeps the idle
// ones of the other workers first.
func TestConnBudget(t *testing.T) {
	w := startWorker(t, "w")
	m := NewMetrics(prometheus.NewRegistry())
	del := New(Options{Metrics: m, MaxConns: 4, Log: testLogger(t)})
	t.Cleanup(func() { del.Close(context.Background()) })
	var qs []*Queue
	for i := range 8 {
		qs = append(qs, del.NewQueue(fmt.Sprint("w", i), w.HintEndpoint()))
	}
	peak := int64(0)
	const rounds = 5
	for r := range rounds {
		for i, q := range qs {
			q.Enqueue([]byte(message(fmt.Sprintf("m%d-%d", r, i), staticJSON(1, "x"))), time.Now())
			sent := float64(r*len(qs) + i + 1)
			testenv.Eventually(t, 5*time.Second, "every hint sent or refused", func(context.Context) error {
				peak = max(peak, del.conns.open.Load())
				if v := testutil.ToFloat64(m.hintsSent) + testutil.ToFloat64(m.errConnLimit); v != sent {
					return fmt.Errorf("%v hints sent or refused, want %v", v, sent)
				}
				return nil
			})
		}
	}
	waitSent(t, m, 8*rounds)
	if peak > 4 {
		t.Errorf("%d connections open at once, over the budget of 4", peak)
	}
	if got := testutil.ToFloat64(m.errConnLimit); got != 0 {
		t.Errorf("%v posts found no connection, one worker posting at a time", got)
	}
}

// TestConnLimit: the budget is the flag's, lowered to what the descriptor
// limit leaves after the listeners, never under minWorkerConns.
func TestConnLimit(t *testing.T) {
	nofile, ok := openFileLimit()
	if !ok {
		t.Skip("no descriptor limit to read here")
	}
	if got := ConnLimit(0, 0); got != min(DefaultMaxWorkerConns, nofile-fdReserve) {
		t.Errorf("ConnLimit(0, 0) = %d under %d descriptors", got, nofile)
	}
	if got, want := ConnLimit(1<<30, 100), nofile-100-fdReserve; got != max(want, minWorkerConns) {
		t.Errorf("ConnLimit(2^30, 100) = %d, want %d", got, want)
	}
	if got := ConnLimit(1, nofile); got != minWorkerConns {
		t.Errorf("ConnLimit(1, all) = %d, want %d", got, minWorkerConns)
	}
}

// TestConnBudgetSweepsIdle: with a budget of 4, two workers hold idle
// connections and two hold theirs in slow posts; a fifth worker's dial
// finds the budget spent, closes the idle connections and is sent, not
// refused. The idle workers and the fifth have endpoints of their own:
// workers at one endpoint share its client and its idle connections.
func TestConnBudgetSweepsIdle(t *testing.T) {
	fasts := []*simworker.Server{startWorker(t, "fast0"), startWorker(t, "fast1"), startWorker(t, "fast2")}
	slow := startWorker(t, "slow")
	slow.SetBehaviour(http.StatusNoContent, 800*time.Millisecond)
	m := NewMetrics(prometheus.NewRegistry())
	del := New(Options{Metrics: m, MaxConns: 4, Timeout: 3 * time.Second, Log: testLogger(t)})
	t.Cleanup(func() { del.Close(context.Background()) })
	msg := func(id string) []byte { return []byte(message(id, staticJSON(1, "x"))) }
	for i := range 2 {
		del.NewQueue(fmt.Sprint("idle", i), fasts[i].HintEndpoint()).Enqueue(msg(fmt.Sprint("i", i)), time.Now())
		waitSent(t, m, i+1)
	}
	for i := range 2 {
		del.NewQueue(fmt.Sprint("slow", i), slow.HintEndpoint()).Enqueue(msg(fmt.Sprint("s", i)), time.Now())
	}
	testenv.Eventually(t, 2*time.Second, "four connections open", func(context.Context) error {
		if n := del.conns.open.Load(); n != 4 {
			return fmt.Errorf("%d connections open, want 4", n)
		}
		return nil
	})
	del.NewQueue("late", fasts[2].HintEndpoint()).Enqueue(msg("late"), time.Now())
	waitSent(t, m, 5)
	if got := testutil.ToFloat64(m.errConnLimit); got != 0 {
		t.Errorf("%v posts refused for the budget; the idle connections should have made room", got)
	}
	if n := del.conns.open.Load(); n > 4 {
		t.Errorf("%d connections open, over the budget of 4", n)
	}
}
