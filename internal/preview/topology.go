package preview

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// Assumptions are the model's settings: every report prints them.
type Assumptions struct {
	// BlockSize is the tokens per hash id of the trace (a recorded row's
	// own block_size overrides it).
	BlockSize int `json:"block_size"`
	// EngineBlockSize is the engine's KV block size in tokens, the block
	// size bookings carry and the unit of block counts (min_blocks,
	// max_blocks, cache_blocks); 0 is BlockSize. It divides BlockSize:
	// the model keeps a trace block as a run of BlockSize/EngineBlockSize
	// engine blocks, cached, fetched and evicted together.
	EngineBlockSize int `json:"engine_block_size,omitempty"`
	// Topology is the workers of each role.
	Topology Topology `json:"topology"`
	// PrefillMSPerToken is the time to compute one prompt token,
	// FetchMSPerBlock the time to bring one block by kv.fetch, and
	// DecodeMSPerToken the time per output token (it sets when a request
	// completes, and so when kv.retain and kv.evict run).
	PrefillMSPerToken float64 `json:"prefill_ms_per_token"`
	FetchMSPerBlock   float64 `json:"fetch_ms_per_block"`
	DecodeMSPerToken  float64 `json:"decode_ms_per_token"`
	// Seed seeds the random choices of selections that draw (random,
	// power of two, a temperature above 0) unless their own seed is set.
	Seed uint64 `json:"seed"`
	// RecordedChoices replays a recorded trace's worker and committed
	// copy instead of the selection model's.
	RecordedChoices bool `json:"recorded_choices"`
	// EvictInUse is what kv.evict does to a block that another request
	// active on the worker is reading: EvictKeep (a reference-counted
	// prefix cache, as vLLM's and SGLang's) leaves it cached; EvictFree
	// frees it all the same; EvictOracle keeps it, and also every block a
	// later row of the trace reads: an upper bound on kv.evict, what it
	// gives when a session's final turn shares nothing with the rows
	// after it.
	EvictInUse EvictInUse `json:"evict_in_use"`
	// Windows is how many equal spans of time the trace is cut into for
	// the interval of the headline deltas; 0 or 1 gives none.
	Windows int `json:"windows"`
	// Sensitivity replays the change again at half and twice the workers
	// and the cache (the strip of signs).
	Sensitivity bool `json:"sensitivity"`
}

// EvictInUse is the engine semantic of kv.evict on blocks in use.
type EvictInUse string

// The values of EvictInUse.
const (
	EvictKeep EvictInUse = "keep"
	EvictFree EvictInUse = "free"
	// EvictOracle is EvictKeep that also knows the trace's future.
	EvictOracle EvictInUse = "oracle"
)

// ParseEvictInUse reads --evict-in-use.
func ParseEvictInUse(s string) (EvictInUse, error) {
	switch EvictInUse(s) {
	case EvictKeep, EvictFree, EvictOracle:
		return EvictInUse(s), nil
	}
	return "", fmt.Errorf("%q; it must be keep (reference-counted: a block another active request reads stays), free (kv.evict frees it all the same) or oracle (keep, and a block a later row reads stays too: an upper bound)", s)
}

// Defaults of the model's assumptions.
const (
	DefaultBlockSize         = 512
	DefaultWorkers           = 8
	DefaultCacheBlocks       = 4096
	DefaultPrefillMSPerToken = 0.05
	DefaultFetchMSPerBlock   = 0.5
	DefaultDecodeMSPerToken  = 20
	DefaultSeed              = 1
	DefaultEvictInUse        = EvictKeep
	DefaultWindows           = 6
)

// Topology is the workers of each role: a default and per-role overrides,
// as a small YAML file gives them:
//
//	default: {workers: 8, cache_blocks: 4096}
//	roles:
//	  prefill: {workers: 4, cache_blocks: 2048, source_endpoints: true}
//	  decode: {workers: 4, hint_capable: true}
type Topology struct {
	Default RoleTopology            `json:"default"`
	Roles   map[string]RoleTopology `json:"roles,omitempty"`
}

// RoleTopology is one role's workers.
type RoleTopology struct {
	// Workers is the number of workers, named "<role>-<i>".
	Workers int `json:"workers,omitempty"`
	// CacheBlocks is each worker's KV cache capacity in engine blocks.
	CacheBlocks int `json:"cache_blocks,omitempty"`
	// HintCapable is whether the workers advertise router_hint (default
	// true).
	HintCapable *bool `json:"hint_capable,omitempty"`
	// SourceEndpoints is whether the workers advertise a KV control
	// endpoint that a committed copy naming them as its source resolves
	// to (default true); without one the dispatcher drops the copy.
	SourceEndpoints *bool `json:"source_endpoints,omitempty"`
}

func (t RoleTopology) hintCapable() bool     { return t.HintCapable == nil || *t.HintCapable }
func (t RoleTopology) sourceEndpoints() bool { return t.SourceEndpoints == nil || *t.SourceEndpoints }

// For returns role's topology, its fields defaulted from Default.
func (t Topology) For(role string) RoleTopology {
	r := t.Roles[role]
	if r.Workers == 0 {
		r.Workers = t.Default.Workers
	}
	if r.CacheBlocks == 0 {
		r.CacheBlocks = t.Default.CacheBlocks
	}
	if r.HintCapable == nil {
		r.HintCapable = t.Default.HintCapable
	}
	if r.SourceEndpoints == nil {
		r.SourceEndpoints = t.Default.SourceEndpoints
	}
	return r
}

// ParseTopology reads a topology file strictly; fields it leaves out keep
// def's.
func ParseTopology(data []byte, def RoleTopology) (Topology, error) {
	var t Topology
	if err := yaml.UnmarshalStrict(data, &t); err != nil {
		return t, fmt.Errorf("topology: %w", err)
	}
	if t.Default.Workers == 0 {
		t.Default.Workers = def.Workers
	}
	if t.Default.CacheBlocks == 0 {
		t.Default.CacheBlocks = def.CacheBlocks
	}
	if t.Default.HintCapable == nil {
		t.Default.HintCapable = def.HintCapable
	}
	if t.Default.SourceEndpoints == nil {
		t.Default.SourceEndpoints = def.SourceEndpoints
	}
	return t, t.check()
}

func (t Topology) check() error {
	check := func(where string, r RoleTopology) error {
		if r.Workers < 0 || r.Workers > 4096 {
			return fmt.Errorf("topology %s: workers is %d; it must be from 1 to 4096", where, r.Workers)
		}
		if r.CacheBlocks < 0 {
			return fmt.Errorf("topology %s: cache_blocks is %d; it must be 0 or more", where, r.CacheBlocks)
		}
		return nil
	}
	if err := check("default", t.Default); err != nil {
		return err
	}
	if t.Default.Workers == 0 {
		return fmt.Errorf("topology default: workers must be at least 1")
	}
	for _, role := range slices.Sorted(maps.Keys(t.Roles)) {
		if err := check("role "+role, t.Roles[role]); err != nil {
			return err
		}
	}
	return nil
}

// describe writes the topology for a report, roles sorted.
func (t Topology) describe(roles []string, blockSize int) string {
	var parts []string
	for _, r := range roles {
		rt := t.For(r)
		s := fmt.Sprintf("%s: %d workers x %d blocks of %d tokens (%d tokens a worker)", r, rt.Workers, rt.CacheBlocks, blockSize, rt.CacheBlocks*blockSize)
		if !rt.hintCapable() {
			s += ", not hint-capable"
		}
		if !rt.sourceEndpoints() {
			s += ", no source endpoints"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}
