package devcli

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/kvrouter/kv-hint-operator/internal/cli"
	"github.com/kvrouter/kv-hint-operator/internal/dev/devenv"
	"github.com/kvrouter/kv-hint-operator/pkg/dispatch"
)

func newRouterCommand() *cobra.Command {
	var (
		listen, hintsURL, name string
		workers                []string
		hintPath               string
	)
	cmd := &cobra.Command{
		Use:   "router --hints-url URL [--worker ROLE/ID=URL ...]",
		Short: "Run the stand-in router: it books every request through the kvhint sidecar and carries the hint in-band",
		Long: `Run the small router that kvhint-dev dev puts in front of its simulated
workers, on its own: the stand-in for your router in config/router's
Deployment, so that a first RouterRole goes Ready before your own router
is wired to the sidecar.

For every completion request (POST /v1/completions, /v1/chat/completions)
it books a worker of each role through the sidecar's booking API
(--hints-url, POST .../v1/bookings), carries the answered hint in-band on
the request (kv_transfer_params.kv_hint; --hint-path for the others) and
forwards it to the booked worker. Roles run prefill first, then decode.
With no --worker it still runs and serves GET /healthz, and answers
completion requests 503: it books nothing.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			base, ok := strings.CutSuffix(hintsURL, "/v1/bookings")
			if !ok {
				return fmt.Errorf("--hints-url %q: want the booking API's URL, ending in /v1/bookings (http://127.0.0.1:8790/v1/bookings, unix:///run/kvhint/booking.sock/v1/bookings)", hintsURL)
			}
			path, err := dispatch.ParseInBandPath(hintPath)
			if err != nil {
				return fmt.Errorf("--hint-path: %w", err)
			}
			roles, err := standInRoles(name, workers)
			if err != nil {
				return err
			}
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return fmt.Errorf("--listen %s: %w", listen, err)
			}
			ctx, stop := signal.NotifyContext(cli.ContextOrBackground(cmd), os.Interrupt, syscall.SIGTERM)
			defer stop()
			f := devenv.ServeStandInRouter(ln, name, base, roles, path)
			fmt.Fprintf(cmd.OutOrStdout(), "router %s: serving at %s, booking at %s, %d roles\n", name, f.URL, hintsURL, len(roles))
			<-ctx.Done()
			// As a pod's router on SIGTERM: answer what is in flight,
			// within the pod's grace period.
			sctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			return f.Shutdown(sctx)
		},
	}
	f := cmd.Flags()
	f.StringVar(&listen, "listen", ":8000", "address to serve completion requests on")
	f.StringVar(&hintsURL, "hints-url", "http://127.0.0.1:8790/v1/bookings", "the kvhint sidecar's booking URL: http://HOST:PORT/v1/bookings, or unix:///SOCKET/v1/bookings over a Unix socket")
	f.StringVar(&name, "router", "llama", "the router's name, in request IDs and errors")
	f.StringVar(&hintPath, "hint-path", dispatch.InBandKVHint.String(), "where the forwarded request carries the hint: kv_transfer_params.kv_hint, kv_hints or kv_transfer_params.router_hint")
	f.StringArrayVar(&workers, "worker", nil, "a worker to book, ROLE/ID=URL[,router_hint] (role prefill or decode); repeat for each")
	return cmd
}

// standInRoles reads --worker flags into roles, prefill before decode.
func standInRoles(router string, flags []string) ([]devenv.StandInRole, error) {
	byRole := map[string][]*devenv.Worker{}
	for _, s := range flags {
		role, rest, ok := strings.Cut(s, "/")
		id, url, ok2 := strings.Cut(rest, "=")
		if !ok || !ok2 || id == "" || url == "" {
			return nil, fmt.Errorf("--worker %q: want ROLE/ID=URL[,router_hint]", s)
		}
		if role != "prefill" && role != "decode" {
			return nil, fmt.Errorf("--worker %q: role %q is neither prefill nor decode", s, role)
		}
		url, caps, _ := strings.Cut(url, ",")
		byRole[role] = append(byRole[role], &devenv.Worker{ID: id, Router: router, Component: role, RouterHint: caps == "router_hint", URL: strings.TrimSuffix(url, "/")})
	}
	var roles []devenv.StandInRole
	for _, r := range []string{"prefill", "decode"} {
		if ws := byRole[r]; len(ws) > 0 {
			roles = append(roles, devenv.StandInRole{Name: r, Workers: ws})
		}
	}
	return roles, nil
}
