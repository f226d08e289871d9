package outcomes

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"

	"github.com/kvrouter/kv-hint-operator/internal/rolloutapi"
)

// ShadowSource gives the shadow comparisons of the staged candidate, by
// candidate hash (the booking stage keeps them).
type ShadowSource interface {
	Shadow() map[string]*rolloutapi.ShadowCounts
}

// Handler serves GET rolloutapi.OutcomesPath?since=<Unix ms> on the ops
// listener: the store's samples since then (all without since), with the
// sidecar's pod name and, when shadow is set, its shadow counts.
func Handler(s *Store, pod string, shadow ShadowSource) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+rolloutapi.OutcomesPath, func(w http.ResponseWriter, r *http.Request) {
		var since int64
		if v := r.URL.Query().Get("since"); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusBadRequest)
				json.NewEncoder(w).Encode(map[string]string{"error": fmt.Sprintf("query parameter since=%q: want Unix milliseconds, 0 or more", v)})
				return
			}
			since = n
		}
		out := rolloutapi.Outcomes{Pod: pod, Configs: s.Since(since)}
		if shadow != nil {
			out.Shadow = shadow.Shadow()
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(out)
	})
	return mux
}
