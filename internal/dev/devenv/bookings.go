package devenv

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kvrouter/kv-hint-operator/internal/dev/simworker"
)

// Traffic is the small, steady stream of completion requests the dev
// environment sends through each front router: llama's go to a prefill
// and then a decode worker (a prefill booking on another worker than the
// session's last turn's carries a committed KV copy of that turn's blocks,
// as its kvcr selection would commit it), chat's to a
// decode worker, in multi-turn sessions that end with a final turn.
type Traffic struct {
	fronts []*FrontRouter
}

// Totals returns the counts of the front routers, summed by router (a
// router with several pods has a front router in each).
func (t *Traffic) Totals() map[string]BookingTotals {
	out := map[string]BookingTotals{}
	for _, f := range t.fronts {
		out[f.Router] = out[f.Router].plus(f.Totals())
	}
	return out
}

// maxInFlight bounds the requests in flight per router; a tick that finds
// them all busy waits for one.
const maxInFlight = 16

// DriveRequests runs until ctx ends, at rate completion requests per
// second per front router.
func (e *Env) DriveRequests(ctx context.Context, rate float64) *Traffic {
	t := &Traffic{fronts: e.Fronts}
	for _, f := range e.Fronts {
		go drive(ctx, f, rate)
	}
	return t
}

func drive(ctx context.Context, f *FrontRouter, rate float64) {
	client := &http.Client{Timeout: 30 * time.Second}
	sessions := newSessions(cmp.Or(f.Pod, f.Router))
	route, chat := "/v1/completions", f.Router == "chat"
	if chat {
		route = "/v1/chat/completions"
	}
	slots := make(chan struct{}, maxInFlight)
	var wg sync.WaitGroup
	defer wg.Wait()
	tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		ses, body := sessions.next(chat)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.URL+route, bytes.NewReader(body))
			if err != nil {
				return
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-Session-Id", ses.id)
			req.Header.Set("X-Session-Turn", strconv.Itoa(ses.turn))
			req.Header.Set("X-Session-Final", strconv.FormatBool(ses.final))
			// The front router counts what failed; the answer is drained
			// so that the connection is reused.
			if resp, err := client.Do(req); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
}

// sessions makes the requests of interleaved multi-turn sessions.
type sessions struct {
	prefix string
	rng    *rand.Rand
	n      int
	live   []*liveSession
}

type liveSession struct {
	id          string
	turn, turns int
	// text is the session's prompt so far: each turn's prompt is the
	// last one's and a turn more, so the workers' caches see the
	// session's prefix again.
	text string
}

// turn is one request's place in its session.
type turn struct {
	id    string
	turn  int
	final bool
}

func newSessions(router string) *sessions {
	return &sessions{prefix: router + "-" + strconv.FormatInt(time.Now().Unix(), 36) + "-sess-",
		rng: rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 2))}
}

// next returns the next request: a turn of a live session most of the
// time, the first of a new one otherwise, with a prompt that grows by a
// turn each time.
func (s *sessions) next(chat bool) (turn, []byte) {
	if len(s.live) < 8 || s.rng.IntN(4) == 0 {
		s.n++
		id := s.prefix + strconv.Itoa(s.n)
		s.live = append(s.live, &liveSession{id: id, turns: 1 + s.rng.IntN(4), text: words(s.rng, id, 64+s.rng.IntN(512))})
	}
	i := s.rng.IntN(len(s.live))
	ls := s.live[i]
	ls.turn++
	ls.text += words(s.rng, "turn "+strconv.Itoa(ls.turn), 16+s.rng.IntN(128))
	t := turn{id: ls.id, turn: ls.turn, final: ls.turn >= ls.turns}
	if t.final {
		s.live = append(s.live[:i], s.live[i+1:]...)
	}
	prompt := ls.text
	var body []byte
	if chat {
		body, _ = json.Marshal(map[string]any{"model": "chat", "max_tokens": 16,
			"messages": []map[string]string{{"role": "user", "content": prompt}}})
	} else {
		body, _ = json.Marshal(map[string]any{"model": "llama", "max_tokens": 16, "prompt": prompt})
	}
	return t, body
}

// words is about tokens tokens of text (simworker.BytesPerToken bytes a
// token) that begin with head and go on with random words.
func words(rng *rand.Rand, head string, tokens int) string {
	var b strings.Builder
	b.WriteString(head)
	for b.Len() < tokens*simworker.BytesPerToken {
		b.WriteString(" w")
		b.WriteString(strconv.Itoa(rng.IntN(1000)))
	}
	return b.String()
}
