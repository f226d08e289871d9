package cli

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/controllers"
	"github.com/kvrouter/kv-hint-operator/internal/declared"
	"github.com/kvrouter/kv-hint-operator/internal/rollout"
	"github.com/kvrouter/kv-hint-operator/internal/rollout/provider"
	"github.com/kvrouter/kv-hint-operator/pkg/hints"
)

type managerOptions struct {
	kubeconfig              string
	namespaces              []string
	metricsAddr             string
	metricsSecure           bool
	metricsCertDir          string
	enableHTTP2             bool
	probeAddr               string
	leaderElect             bool
	leaderElectionID        string
	leaderElectionNamespace string
	workers                 int
	catalogNamespaces       []string
	catalogLimits           declared.Limits
	rolloutAllowLoopback    bool
	zap                     zap.Options
}

func newManagerCommand(cat *hints.Catalog) *cobra.Command {
	o := managerOptions{catalogLimits: declared.DefaultLimits()}
	cmd := &cobra.Command{
		Use:   "manager",
		Short: "Run the operator: compile RouterRoles and HintPolicies into each router's hints ConfigMap",
		Long: `Run the operator. For every router it compiles the RouterRoles that name it,
and the HintPolicies they reference, with the same rules the sidecar runs,
into the ConfigMap "<router>-hints" (key hints.yaml, hash annotation
hints.kvrouter.io/hash), and reports on each object: Accepted, ResolvedRefs,
Programmed (how many router pods run the current config, from their
hints.kvrouter.io/applied-hash annotation) and Ready.

A role whose new spec breaks a rule keeps running its last accepted entry;
the manager reads it back from the ConfigMap, so restarts lose nothing.

Serves /healthz and /readyz on --health-probe-bind-address, and
controller-runtime metrics on --metrics-bind-address over HTTPS: a scraper
sends a bearer token, which the manager checks with a TokenReview, and
must be allowed "get" on the non-resource URL /metrics (the ClusterRole
kvhint-metrics-reader), which it checks with a SubjectAccessReview. The
certificate is tls.crt/tls.key in --metrics-cert-dir, else a self-signed
one made at start. --metrics-secure=false serves plain, unauthenticated
HTTP: for a manager on your own machine only. Logs are JSON (see the
--zap-* flags).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			parent := cmd.Context()
			if parent == nil {
				parent = context.Background()
			}
			ctx, stop := signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runManager(ctx, cat, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file; default: in-cluster, then $KUBECONFIG and ~/.kube/config")
	f.StringSliceVar(&o.namespaces, "namespace", nil, "watch only this namespace (repeatable or comma-separated); default: all namespaces")
	f.StringVar(&o.metricsAddr, "metrics-bind-address", ":8443", `address of the metrics endpoint; "0" turns it off`)
	f.BoolVar(&o.metricsSecure, "metrics-secure", true, "serve metrics over HTTPS to authenticated, authorized scrapers only; false serves plain HTTP to anyone (local development only)")
	f.StringVar(&o.metricsCertDir, "metrics-cert-dir", "", "directory with tls.crt and tls.key for the metrics endpoint; default: a self-signed certificate made at start")
	f.BoolVar(&o.enableHTTP2, "enable-http2", false, "allow HTTP/2 on the metrics endpoint; off by default because of the HTTP/2 stream reset and rapid reset attacks")
	f.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", `address of /healthz and /readyz; "0" turns them off`)
	f.BoolVar(&o.leaderElect, "leader-elect", false, "elect a leader through a Lease, so that only one replica reconciles")
	f.StringVar(&o.leaderElectionID, "leader-election-id", "kvhint-manager.hints.kvrouter.io", "name of the leader election Lease")
	f.StringVar(&o.leaderElectionNamespace, "leader-election-namespace", "", "namespace of the Lease; default: the manager's own namespace")
	f.IntVar(&o.workers, "workers", 4, "routers (and HintPolicies) reconciled at once")
	f.StringSliceVar(&o.catalogNamespaces, "catalog-namespace", nil, "read declared catalogs (ConfigMaps labelled "+v1alpha1.CatalogForLabel+") only in this namespace (repeatable or comma-separated; within --namespace); routers elsewhere are checked against the linked catalog. Default: every namespace the manager watches")
	o.catalogLimits.AddFlags(f)
	f.BoolVar(&o.rolloutAllowLoopback, "rollout-allow-loopback-pods", false, "let a RouterRollout's analysis ask router pods whose status.podIP is a loopback address, for a local development control plane whose sidecars run on the host; never in a cluster, where a pod could steer the manager to its own host")
	zfs := flag.NewFlagSet("zap", flag.ContinueOnError)
	o.zap.BindFlags(zfs)
	f.AddGoFlagSet(zfs)
	return cmd
}

func runManager(ctx context.Context, cat *hints.Catalog, o managerOptions) error {
	log := zap.New(zap.UseFlagOptions(&o.zap))
	ctrl.SetLogger(log)

	cfg, err := restConfig(o.kubeconfig)
	if err != nil {
		return err
	}
	cfg.UserAgent = "kvhint-manager"
	scheme, err := controllers.NewScheme()
	if err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                        scheme,
		Logger:                        log,
		Cache:                         controllers.CacheOptions(o.namespaces),
		Metrics:                       metricsOptions(o),
		HealthProbeBindAddress:        o.probeAddr,
		LeaderElection:                o.leaderElect,
		LeaderElectionID:              o.leaderElectionID,
		LeaderElectionNamespace:       o.leaderElectionNamespace,
		LeaderElectionReleaseOnCancel: true,
		// A work item is one router (or one HintPolicy), so workers never
		// share an item; status writes wait on the API server, not on the
		// CPU, and one worker left 1,000 roles queued behind it.
		Controller: ctrlconfig.Controller{MaxConcurrentReconciles: o.workers},
	})
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}
	if err := controllers.SetupWithOptions(ctx, mgr, cat, controllers.Options{
		Namespaces: o.namespaces, CatalogNamespaces: o.catalogNamespaces, CatalogLimits: o.catalogLimits,
		RolloutAnalysis: rollout.NewJudge(provider.SidecarOptions{AllowLoopback: o.rolloutAllowLoopback}, provider.PrometheusOptions{}),
	}); err != nil {
		return err
	}
	if err := controllers.RegisterMetrics(ctrlmetrics.Registry, mgr); err != nil {
		return fmt.Errorf("registering the manager's metrics: %w", err)
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("informers", cacheSynced(mgr.GetCache())); err != nil {
		return err
	}

	log.Info("Starting manager", "namespaces", o.namespaces, "catalogNamespaces", o.catalogNamespaces, "leaderElection", o.leaderElect,
		"selectionTypes", cat.SelectionTypes(), "hintTypes", cat.HintTypes())
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("running the manager: %w", err)
	}
	return nil
}

// metricsOptions serves metrics the way current kubebuilder projects do:
// HTTPS, and only to a caller whose bearer token the API server accepts
// (TokenReview) and who may get /metrics (SubjectAccessReview). The
// manager may create both reviews through the ClusterRole
// kvhint-metrics-auth (config/rbac/metrics_auth_role.yaml), kept apart
// from the generated kvhint-manager role so that a namespaced install
// (config/namespaced) can bind that one per namespace.
func metricsOptions(o managerOptions) metricsserver.Options {
	opts := metricsserver.Options{BindAddress: o.metricsAddr, SecureServing: o.metricsSecure, CertDir: o.metricsCertDir}
	if !o.metricsSecure {
		return opts
	}
	opts.FilterProvider = filters.WithAuthenticationAndAuthorization
	if !o.enableHTTP2 {
		opts.TLSOpts = append(opts.TLSOpts, func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} })
	}
	return opts
}

// cacheSynced is ready once the informers the reconcilers read from hold a
// full list, so a rollout waits for a replica that can answer.
func cacheSynced(c cache.Cache) healthz.Checker {
	return func(req *http.Request) error {
		ctx, cancel := context.WithTimeout(req.Context(), time.Second)
		defer cancel()
		if !c.WaitForCacheSync(ctx) {
			return errors.New("informer caches are not synced yet")
		}
		return nil
	}
}

// restConfig loads --kubeconfig, else the in-cluster config, else the
// usual kubeconfig loading rules. The manager and the sidecar share it.
func restConfig(kubeconfig string) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	} else if cfg, err = rest.InClusterConfig(); errors.Is(err, rest.ErrNotInCluster) {
		cfg, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
			clientcmd.NewDefaultClientConfigLoadingRules(), &clientcmd.ConfigOverrides{}).ClientConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes client config: %w", err)
	}
	// client-go's default of 5 requests/s throttles a manager writing the
	// status of many roles to seconds per change. Like controller-runtime's
	// own config loader, leave flow control to the API server (priority
	// and fairness) unless the kubeconfig asked for a limit.
	if cfg.QPS == 0 {
		cfg.QPS = -1
	}
	return cfg, nil
}
