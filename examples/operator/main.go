package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/gcprobe/probe"
	"github.com/gcprobe/probe/examples/operator/internal/controller"
	otlpexporter "github.com/gcprobe/probe/exporters/otlp"
	"github.com/gcprobe/probe/k8sfinalizers"
	"github.com/gcprobe/probe/tracing/reconciletrace"
)

// ProfilePath is where the metrics server serves gcprobe's profile of
// outstanding finalizers and cleanups.
const ProfilePath = "/debug/pprof/finalizers"

// PagePath is where the metrics server serves gcprobe's live page
// (probe.PagePath), behind the same authentication as /metrics.
const PagePath = probe.PagePath

// Options configure run.
type Options struct {
	// MetricsAddr is the secure metrics server's address (":8443" in a
	// cluster, "127.0.0.1:PORT" in tests).
	MetricsAddr string
	// HealthAddr serves /healthz and /readyz; "0" or "" disables it.
	HealthAddr string
	// LeaderElection turns on leader election (for more than one replica).
	LeaderElection bool
	// LeaderElectionNamespace is where the leader election Lease lives;
	// "" is the namespace the operator runs in (in a cluster only).
	LeaderElectionNamespace string
	// StuckAfter is how long a ConfigMap may stay Terminating before it is
	// reported (0: k8sfinalizers.DefaultStuckAfter).
	StuckAfter time.Duration
	// TracerProvider receives the reconcile spans and gcprobe's spans.
	// nil: an OTLP provider from the OTEL_* environment when
	// OTEL_EXPORTER_OTLP_ENDPOINT (or ..._TRACES_ENDPOINT) is set, else a
	// no-op provider.
	TracerProvider trace.TracerProvider
	// Logger is the operator's logger (nil: discard).
	Logger *slog.Logger

	// skipNameValidation lets tests run the operator more than once in
	// one process: controller-runtime refuses a second controller of one
	// name in a process.
	skipNameValidation bool
}

// bindFlags defines the operator's command-line flags on fs, storing into
// opts. The e2e test parses the Deployment's args (config/manager) with it.
func bindFlags(fs *flag.FlagSet, opts *Options) {
	fs.StringVar(&opts.MetricsAddr, "metrics-bind-address", ":8443", "address of the secure (HTTPS, authenticated and authorized) metrics server serving /metrics and "+ProfilePath)
	fs.StringVar(&opts.HealthAddr, "health-probe-bind-address", ":8081", "address of /healthz and /readyz (0 disables)")
	fs.BoolVar(&opts.LeaderElection, "leader-elect", false, "use leader election (for more than one replica)")
	fs.StringVar(&opts.LeaderElectionNamespace, "leader-election-namespace", "", "namespace of the leader election Lease (default: the operator's own, in a cluster)")
	fs.DurationVar(&opts.StuckAfter, "stuck-after", k8sfinalizers.DefaultStuckAfter, "report a ConfigMap Terminating for longer than this")
}

func main() {
	var opts Options
	bindFlags(flag.CommandLine, &opts)
	// --kubeconfig is registered by controller-runtime.
	flag.Parse()

	opts.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctrl.SetLogger(logr.FromSlogHandler(opts.Logger.Handler()))
	cfg, err := ctrl.GetConfig()
	if err != nil {
		fmt.Fprintln(os.Stderr, "operator: no cluster configuration:", err)
		os.Exit(1)
	}
	if err := run(ctrl.SetupSignalHandler(), cfg, opts); err != nil {
		fmt.Fprintln(os.Stderr, "operator:", err)
		os.Exit(1)
	}
}

// run runs the operator against the cluster of cfg until ctx ends.
func run(ctx context.Context, cfg *rest.Config, opts Options) (err error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	tp := opts.TracerProvider
	if tp == nil {
		otp, err := tracerProviderFromEnv(ctx)
		if err != nil {
			return err
		}
		defer func() {
			// Flush the spans still queued, within a bound: ctx is over.
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			err = errors.Join(err, otp.Shutdown(sctx))
		}()
		tp = otp
	}

	// The probe is a manager.Runnable.
	p, err := probe.New(probeOptions(tp, log)...)
	if err != nil {
		return err
	}

	healthAddr := opts.HealthAddr
	if healthAddr == "" {
		healthAddr = "0"
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Metrics: metricsserver.Options{
			BindAddress: opts.MetricsAddr,
			// HTTPS with a self-signed certificate (mount a real one
			// with CertDir), and every request authenticated with a
			// TokenReview and authorized with a SubjectAccessReview
			// for "get" on the path: the profile reveals code
			// locations, so it gets the same protection as /metrics.
			SecureServing:  true,
			FilterProvider: filters.WithAuthenticationAndAuthorization,
			ExtraHandlers: map[string]http.Handler{
				ProfilePath: p.ProfileHandler(),
				PagePath:    p.PageHandler(), // the live page
			},
		},
		HealthProbeBindAddress:  healthAddr,
		LeaderElection:          opts.LeaderElection,
		LeaderElectionID:        "operator.example.gcprobe.dev",
		LeaderElectionNamespace: opts.LeaderElectionNamespace,
		// Hand the Lease over at once on a clean stop (a rollout)
		// rather than after its duration.
		LeaderElectionReleaseOnCancel: true,
		Controller:                    config.Controller{SkipNameValidation: &opts.skipNameValidation},
		Cache: cache.Options{
			// The informers keep metadata only (see below); without
			// managedFields that is about half as much again.
			DefaultTransform: cache.TransformStripManagedFields(),
		},
	})
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}
	if err := mgr.Add(p); err != nil {
		return err
	}

	// The Kubernetes finalizer backlog of ConfigMaps, on the same
	// metadata-only informer as the reconciler.
	kfOpts := []k8sfinalizers.Option{
		k8sfinalizers.WithGVKs(controller.ConfigMapGVK),
		k8sfinalizers.WithLogger(log),
		k8sfinalizers.WithTracerProvider(tp),
	}
	if opts.StuckAfter > 0 {
		kfOpts = append(kfOpts, k8sfinalizers.WithStuckAfter(opts.StuckAfter))
	}
	kf, err := k8sfinalizers.New(kfOpts...)
	if err != nil {
		return err
	}
	if err := kf.SetupWithManager(mgr); err != nil {
		return err
	}

	// The reconciler, in a span per reconcile carrying the GC work that
	// overlapped it, the lines that allocated meanwhile and why the GC
	// worked hard.
	r, err := reconciletrace.Wrap(&controller.ConfigMapReconciler{Client: mgr.GetClient()}, p.Sampler(),
		reconciletrace.WithTracerProvider(tp),
		reconciletrace.WithControllerName("configmap"),
		reconciletrace.WithHeapProfile(p.HeapProfile().Snapshot),
		reconciletrace.WithCauses(p.GCCauseNames))
	if err != nil {
		return err
	}
	demo := predicate.NewPredicateFuncs(func(o client.Object) bool {
		return o.GetLabels()[controller.DemoLabel] == "true"
	})
	err = builder.ControllerManagedBy(mgr).
		Named("configmap").
		For(&corev1.ConfigMap{}, builder.OnlyMetadata, builder.WithPredicates(demo)).
		Complete(r)
	if err != nil {
		return fmt.Errorf("setting up the controller: %w", err)
	}

	if healthAddr != "0" {
		if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
			return err
		}
		if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
			return err
		}
	}
	log.Info("starting the operator", "metrics", "https://"+opts.MetricsAddr+"/metrics", "profile", ProfilePath)
	return mgr.Start(ctx)
}

// probeOptions configures the probe as the README's operator section does:
// its collector on the registry the manager's metrics server serves, its
// spans on tp, and its log lines (a site growing, a detector firing) to
// log, the logger main hands controller-runtime too (ctrl.SetLogger), so
// that they come out in the operator's format, beside its own. In an
// operator that set up only controller-runtime's logger, pass
// slog.New(logr.ToSlogHandler(ctrl.Log)). Without WithLogger they would go
// to slog.Default(), in another format.
func probeOptions(tp trace.TracerProvider, log *slog.Logger) []probe.Option {
	return []probe.Option{
		probe.WithRegisterer(metrics.Registry),
		probe.WithTracerProvider(tp),
		probe.WithLogger(log),
	}
}

// tracerProviderFromEnv returns an OTLP tracer provider configured by the
// standard OTEL_* environment when an endpoint is set, and otherwise a
// no-op provider (nothing to export to).
func tracerProviderFromEnv(ctx context.Context) (shutdownProvider, error) {
	if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		return noopProvider{noop.NewTracerProvider()}, nil
	}
	tp, err := otlpexporter.NewTracerProvider(ctx)
	if err != nil {
		return nil, fmt.Errorf("OTLP tracer provider from the environment: %w", err)
	}
	return tp, nil
}

// shutdownProvider is a TracerProvider that run must shut down.
type shutdownProvider interface {
	trace.TracerProvider
	Shutdown(context.Context) error
}

type noopProvider struct{ noop.TracerProvider }

func (noopProvider) Shutdown(context.Context) error { return nil }
