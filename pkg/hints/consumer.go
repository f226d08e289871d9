package hints

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// Action types whose engine consumers have known rules (docs/design.md, 8a). Any
// other type passes through as it is, as it does in Dynamo.
const (
	// ActionKVFetch asks the booked worker to pull blocks from a peer.
	ActionKVFetch = "kv.fetch"
	// ActionKVRetain asks it to keep a session's blocks.
	ActionKVRetain = "kv.retain"
	// ActionKVEvict asks it to free them.
	ActionKVEvict = "kv.evict"
)

// Payload keys the kv.fetch consumer reads.
const (
	KeyBlockHashes           = "block_hashes"
	KeySourceControlEndpoint = "source_control_endpoint"
)

// payloadFacts is what the consumer rules need to know of a payload. An
// ObjectWriter records them as it writes, so that the dispatcher need not
// scan its own payloads again on the booking path; a raw payload is scanned
// for them.
type payloadFacts uint8

const (
	// factHashes: block_hashes is a non-empty list of integers in [0, 2^64).
	factHashes payloadFacts = 1 << iota
	// factHashesBad: block_hashes is present but is something else.
	factHashesBad
	// factEndpointBad: source_control_endpoint is present but is not a
	// non-empty string.
	factEndpointBad
	// factEndpoint: source_control_endpoint is a non-empty string.
	factEndpoint
)

// noteString records what writing the string v under key k means to the
// consumer rules.
func (f *payloadFacts) noteString(k, v string) {
	switch {
	case k == KeyBlockHashes:
		*f |= factHashesBad
	case k == KeySourceControlEndpoint && v == "":
		*f |= factEndpointBad
	case k == KeySourceControlEndpoint:
		*f |= factEndpoint
	}
}

// noteHashes records a list of unsigned integers written under key k.
func (f *payloadFacts) noteHashes(k string, n int) {
	switch {
	case k == KeyBlockHashes && n > 0:
		*f |= factHashes
	case k == KeyBlockHashes:
		*f |= factHashesBad
	case k == KeySourceControlEndpoint:
		*f |= factEndpointBad
	}
}

// noteOther records a value of any other kind written under key k.
func (f *payloadFacts) noteOther(k string) {
	switch k {
	case KeyBlockHashes:
		*f |= factHashesBad
	case KeySourceControlEndpoint:
		*f |= factEndpointBad
	}
}

// checkConsumerRules reports why an engine would refuse a payload of the
// action type, or nil: for kv.fetch, block_hashes must be a non-empty list
// of integers in [0, 2^64) and source_control_endpoint a non-empty string.
// The connector's parser refuses a fetch that does not say where to fetch
// from, and it refuses the whole hint whose fetch breaks these rules, so one
// bad fetch would cost the good actions beside it.
func checkConsumerRules(typ string, f payloadFacts) error {
	if typ != ActionKVFetch {
		return nil
	}
	switch {
	case f&factHashesBad != 0:
		return errors.New("kv.fetch: block_hashes must be a non-empty list of integers in [0, 2^64)")
	case f&factHashes == 0:
		return errors.New("kv.fetch: block_hashes is required: a non-empty list of integers in [0, 2^64)")
	case f&factEndpointBad != 0:
		return errors.New("kv.fetch: source_control_endpoint must be a non-empty string")
	case f&factEndpoint == 0:
		return errors.New("kv.fetch: source_control_endpoint is required: the source worker's control endpoint, a non-empty string")
	}
	return nil
}

// scanPayload checks a raw payload the way ObjectWriter guarantees its own:
// one JSON object, keys in ascending byte order and unique in every object,
// nothing after it; and returns its consumer facts.
func scanPayload(raw []byte) (payloadFacts, error) {
	trimmed := bytes.TrimSpace(raw)
	switch {
	case len(trimmed) == 0:
		return 0, errors.New("payload is empty; it must be a JSON object")
	case trimmed[0] != '{':
		return 0, errors.New("payload must be a JSON object")
	case !json.Valid(trimmed):
		return 0, errors.New("payload is not valid JSON")
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	dec.UseNumber()
	var facts payloadFacts
	if err := scanValue(dec, 0, &facts); err != nil {
		return 0, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return 0, errors.New("payload has data after its object")
	}
	return facts, nil
}

// scanValue reads one value from dec. At depth 0 it is the payload object,
// whose members' kinds become facts.
func scanValue(dec *json.Decoder, depth int, facts *payloadFacts) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	switch tok {
	case json.Delim('{'):
		last := ""
		for first := true; dec.More(); first = false {
			kt, err := dec.Token()
			if err != nil {
				return err
			}
			key := kt.(string)
			if !first && key <= last {
				if key == last {
					return fmt.Errorf("payload key %q is repeated", key)
				}
				return fmt.Errorf("payload key %q comes after %q: keys must ascend", key, last)
			}
			last = key
			if depth == 0 && (key == KeyBlockHashes || key == KeySourceControlEndpoint) {
				if err := scanConsumerMember(dec, key, facts); err != nil {
					return err
				}
				continue
			}
			if err := scanValue(dec, depth+1, facts); err != nil {
				return err
			}
		}
		_, err = dec.Token() // }
		return err
	case json.Delim('['):
		for dec.More() {
			if err := scanValue(dec, depth+1, facts); err != nil {
				return err
			}
		}
		_, err = dec.Token() // ]
		return err
	}
	return nil
}

// scanConsumerMember reads the value of a member the consumer rules name.
func scanConsumerMember(dec *json.Decoder, key string, facts *payloadFacts) error {
	var v any
	if err := dec.Decode(&v); err != nil {
		return err
	}
	switch v := v.(type) {
	case string:
		facts.noteString(key, v)
	case []any:
		if key != KeyBlockHashes {
			facts.noteOther(key)
			return nil
		}
		for _, e := range v {
			n, ok := e.(json.Number)
			if !ok {
				facts.noteOther(key)
				return nil
			}
			if _, err := strconv.ParseUint(string(n), 10, 64); err != nil {
				facts.noteOther(key)
				return nil
			}
		}
		facts.noteHashes(key, len(v))
	default:
		facts.noteOther(key)
	}
	return nil
}
