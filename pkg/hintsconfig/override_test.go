package hintsconfig_test

import (
	"strings"
	"testing"

	"github.com/kvrouter/kv-hint-operator/pkg/hintsconfig"
)

// TestCheckInstanceOverrides: the instance-picking settings of a released
// Frontend hold against the instances of the file it reads.
func TestCheckInstanceOverrides(t *testing.T) {
	released := []byte("kv_hint_policy: {type: kv-evict}\nworker_selection:\n  decode: decode\n  prefill: default\n" +
		"  instances:\n  - name: decode\n    type: dynamo-round-robin\n  - name: spare\n    type: dynamo-random\n")
	perRole := []byte("worker_selection:\n  decode: {type: dynamo-random, hints: []}\n")
	o := func(role, setting, value string) hintsconfig.InstanceOverride {
		return hintsconfig.InstanceOverride{Role: role, Setting: setting, Value: value}
	}
	tests := []struct {
		name      string
		file      []byte
		overrides []hintsconfig.InstanceOverride
		refused   []string // values refused, in order
	}{
		{name: "none", file: released},
		{name: "instances and default", file: released, overrides: []hintsconfig.InstanceOverride{
			o("", hintsconfig.WorkerSelectionPolicyEnv, "spare"), o("prefill", hintsconfig.PrefillPolicyFlag, "default"), o("decode", hintsconfig.DecodePolicyEnv, "decode")}},
		{name: "a name the file does not have", file: released, overrides: []hintsconfig.InstanceOverride{
			o("decode", hintsconfig.DecodePolicyFlag, "decode"), o("prefill", hintsconfig.PrefillPolicyFlag, "fast"), o("", hintsconfig.WorkerSelectionPolicyEnv, "dynamo-random")},
			refused: []string{"fast", "dynamo-random"}},
		{name: "a per-role file names no instance", file: perRole, overrides: []hintsconfig.InstanceOverride{
			o("", hintsconfig.WorkerSelectionPolicyEnv, "default"), o("decode", hintsconfig.DecodePolicyEnv, "decode")}, refused: []string{"decode"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			probs, err := hintsconfig.CheckInstanceOverrides(tt.file, tt.overrides)
			if err != nil {
				t.Fatal(err)
			}
			if len(probs) != len(tt.refused) {
				t.Fatalf("%d problems, want %d: %v", len(probs), len(tt.refused), probs)
			}
			for i, p := range probs {
				if p.Reason != hintsconfig.ReasonUnknownWorkerSelection || !strings.Contains(p.Message, `"`+tt.refused[i]+`"`) {
					t.Errorf("problem %d: %v; want UnknownWorkerSelection naming %q", i, p, tt.refused[i])
				}
			}
			if tt.name == "a name the file does not have" && (probs[0].Role != "prefill" || !strings.Contains(probs[0].Message, "instances: decode, spare")) {
				t.Errorf("problem %v does not name the role and the instances", probs[0])
			}
		})
	}
	if _, err := hintsconfig.CheckInstanceOverrides([]byte("worker_selection: {}\n"), nil); err == nil {
		t.Error("a file the router refuses was read")
	}
}
