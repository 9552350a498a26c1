module github.com/gcprobe/probe

go 1.26.0

require (
	github.com/google/pprof v0.0.0-20240727154555-813a5fbdbec8
	github.com/prometheus/client_golang v1.20.5
	github.com/prometheus/client_model v0.6.1
	go.opentelemetry.io/otel v1.20.0
	go.opentelemetry.io/otel/sdk v1.20.0
	go.opentelemetry.io/otel/trace v1.20.0
	go.uber.org/goleak v1.3.0
	golang.org/x/sys v0.22.0
)

require (
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/go-logr/logr v1.3.0 // indirect
	github.com/go-logr/stdr v1.2.2 // indirect
	github.com/klauspost/compress v1.17.9 // indirect
	github.com/kylelemons/godebug v1.1.0 // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/prometheus/common v0.55.0 // indirect
	github.com/prometheus/procfs v0.15.1 // indirect
	go.opentelemetry.io/otel/metric v1.20.0 // indirect
	google.golang.org/protobuf v1.34.2 // indirect
)
