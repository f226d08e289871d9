package analysis

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kvrouter/kv-hint-operator/internal/rolloutapi"
)

func TestJudgeShadow(t *testing.T) {
	const stable, cand, older = "000000000000000a", "000000000000000b", "000000000000000c"
	onShadow := func(pod string) PodStatus {
		return PodStatus{Pod: pod, Status: &rolloutapi.ConfigStatus{Assigned: stable, Active: stable, LastKnownGood: stable,
			Candidate: &rolloutapi.CandidateStatus{Assigned: cand, Active: cand, Stage: rolloutapi.StageShadow}}}
	}
	refusing := func(pod, hash, err string) PodStatus {
		return PodStatus{Pod: pod, Status: &rolloutapi.ConfigStatus{Assigned: stable, Active: stable,
			Candidate: &rolloutapi.CandidateStatus{Assigned: hash, Stage: rolloutapi.StageShadow, Error: err}}}
	}
	outcomes := []rolloutapi.Outcomes{
		{Pod: "r-1", Shadow: map[string]*rolloutapi.ShadowCounts{
			cand:  {Bookings: 100, Differ: 10, ByAction: map[string]int64{"kv.fetch": 10}, ByRole: map[string]int64{"decode": 10}},
			older: {Bookings: 5, Differ: 5},
		}},
		{Pod: "r-2", Shadow: map[string]*rolloutapi.ShadowCounts{
			cand: {Bookings: 50, Differ: 4, ByAction: map[string]int64{"kv.fetch": 3, "kv.retain": 1}, ByRole: map[string]int64{"decode": 4}, CandidateErrors: 1},
		}},
	}
	sum := rolloutapi.ShadowCounts{Bookings: 150, Differ: 14, CandidateErrors: 1,
		ByAction: map[string]int64{"kv.fetch": 13, "kv.retain": 1}, ByRole: map[string]int64{"decode": 14}}

	cases := []struct {
		name string
		pods []PodStatus
		want ShadowVerdict
	}{{
		name: "every pod runs the candidate in shadow",
		pods: []PodStatus{onShadow("r-2"), onShadow("r-1")},
		want: ShadowVerdict{Phase: Successful, Reason: ReasonShadowRunning, Pods: 2, OnCandidate: 2, Counts: sum,
			Message: "2 of 2 pods run candidate 000000000000000b in shadow: 14 of 150 bookings would differ (kv.fetch 13, kv.retain 1), 1 bookings the candidate failed"},
	}, {
		name: "a NACK fails at once, whatever the others do",
		pods: []PodStatus{onShadow("r-1"), refusing("r-2", cand, `role "decode" hint 0 (kv.fetch): unknown field "fanout"`), {Pod: "r-3"}},
		want: ShadowVerdict{Phase: Failed, Reason: ReasonCandidateRefused, Pods: 3, OnCandidate: 1, Counts: sum,
			Refused: []Refusal{{Pod: "r-2", Error: `role "decode" hint 0 (kv.fetch): unknown field "fanout"`}},
			Waiting: []string{"r-3"},
			Message: `1 of 3 pods refused candidate 000000000000000b: pod r-2: role "decode" hint 0 (kv.fetch): unknown field "fanout"`},
	}, {
		name: "a refusal of an older candidate is waiting, not failing",
		pods: []PodStatus{onShadow("r-1"), refusing("r-2", older, "bad"), {Pod: "r-0"}},
		want: ShadowVerdict{Phase: Inconclusive, Reason: ReasonCandidatePending, Pods: 3, OnCandidate: 1, Counts: sum,
			Waiting: []string{"r-0", "r-2"},
			Message: "1 of 3 pods run candidate 000000000000000b in shadow; waiting for r-0, r-2"},
	}, {
		name: "no pods",
		want: ShadowVerdict{Phase: Inconclusive, Reason: ReasonCandidatePending, Counts: sum, Message: "no router pods to run the candidate"},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := JudgeShadow(cand, c.pods, SumShadow(cand, outcomes))
			if d := cmp.Diff(c.want, got); d != "" {
				t.Fatalf("(-want +got)\n%s", d)
			}
		})
	}

	t.Run("a canary-stage status is not shadow", func(t *testing.T) {
		p := onShadow("r-1")
		p.Status.Candidate.Stage, p.Status.Candidate.Weight = rolloutapi.StageCanary, 10
		if v := JudgeShadow(cand, []PodStatus{p}, rolloutapi.ShadowCounts{}); v.Phase != Inconclusive || v.OnCandidate != 0 {
			t.Fatalf("%+v", v)
		}
	})
	t.Run("many refusals are named up to three", func(t *testing.T) {
		var pods []PodStatus
		for _, n := range []string{"e", "d", "c", "b", "a"} {
			pods = append(pods, refusing(n, cand, "x"))
		}
		v := JudgeShadow(cand, pods, rolloutapi.ShadowCounts{})
		if want := "5 of 5 pods refused candidate 000000000000000b: pod a: x; pod b: x; pod c: x and 2 more"; v.Message != want {
			t.Fatalf("message %q, want %q", v.Message, want)
		}
	})
}
