package devcli

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/kvrouter/kv-hint-operator/internal/dev/loadgen"
)

func newLoadgenCommand() *cobra.Command {
	o := loadgen.Options{}
	var roles []string
	cmd := &cobra.Command{
		Use:   "loadgen --target URL --role NAME=WORKER,...",
		Short: "Replay realistic bookings against a sidecar at a target rate",
		Long: `Replay bookings against a sidecar's booking API at a target rate and report
the rate achieved, latency percentiles and the hints built.

Each request books every --role in order (prefill then decode, say) within a
multi-turn session that ends with a final turn. A role written
NAME=W1,W2:copy=0.3 carries a committed KV copy from another of its workers
on 30% of its bookings, as a kvcr selection would; :copy=0.3:blocks=8192
makes every copy 8,192 block hashes (a 128k-token prompt at block size 16)
instead of the prompt's blocks up to 256. Latency runs from each
booking's scheduled time, so a stalled sidecar is not hidden.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, spec := range roles {
				r, err := parseRoleSpec(spec)
				if err != nil {
					return err
				}
				o.Roles = append(o.Roles, r)
			}
			res, err := loadgen.Run(cmd.Context(), o)
			if err != nil {
				return err
			}
			fmt.Fprint(cmd.OutOrStdout(), res.Report(o))
			if res.Completed == 0 {
				return fmt.Errorf("no booking succeeded")
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Target, "target", "http://127.0.0.1:9470", "the sidecar's booking API: base URL http://HOST:PORT, or unix:///PATH of its socket")
	f.Float64Var(&o.Rate, "rate", 1000, "bookings per second to offer")
	f.DurationVar(&o.Duration, "duration", 10*time.Second, "how long to offer them")
	f.IntVar(&o.Connections, "connections", 16, "keep-alive connections carrying the load")
	f.StringArrayVar(&roles, "role", nil, "role and its workers, NAME=W1,W2[:copy=RATE[:blocks=N]] (repeatable, in booking order)")
	f.IntVar(&o.MaxTurns, "max-turns", 6, "longest session, in turns")
	f.IntVar(&o.BlockSize, "block-size", 16, "tokens per KV block")
	f.Uint64Var(&o.Seed, "seed", 1, "seed of the booking stream")
	f.DurationVar(&o.Timeout, "timeout", 2*time.Second, "timeout of one booking call")
	return cmd
}

// parseRoleSpec reads NAME=W1,W2[:copy=RATE[:blocks=N]].
func parseRoleSpec(spec string) (loadgen.Role, error) {
	name, rest, ok := strings.Cut(spec, "=")
	if !ok || name == "" || rest == "" {
		return loadgen.Role{}, fmt.Errorf("--role %q: want NAME=W1,W2[:copy=RATE[:blocks=N]]", spec)
	}
	r := loadgen.Role{Name: name}
	workers, opts, hasOpt := strings.Cut(rest, ":")
	if hasOpt {
		for _, opt := range strings.Split(opts, ":") {
			if v, ok := strings.CutPrefix(opt, "blocks="); ok {
				n, err := strconv.Atoi(v)
				if err != nil || n < 1 {
					return loadgen.Role{}, fmt.Errorf("--role %q: %q is not blocks=N with N >= 1", spec, opt)
				}
				r.CopyBlocks = n
				continue
			}
			v, ok := strings.CutPrefix(opt, "copy=")
			rate, err := strconv.ParseFloat(v, 64)
			if !ok || err != nil {
				return loadgen.Role{}, fmt.Errorf("--role %q: %q is not copy=RATE or blocks=N", spec, opt)
			}
			r.CopyRate = rate
		}
	}
	for _, w := range strings.Split(workers, ",") {
		if w = strings.TrimSpace(w); w != "" {
			r.Workers = append(r.Workers, w)
		}
	}
	return r, nil
}
