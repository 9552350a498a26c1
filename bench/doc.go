// Package bench holds gcprobe's overhead benchmarks: an operator-like
// workload run without the probe, with probe.Start's defaults and with
// every feature on; the memory the probe takes at 10 000 call sites; micro
// benchmarks of every package's hot paths beside the raw runtime calls and
// client_golang's Go collector; and tests that pin the allocation-free
// paths. Everything lives in its _test.go files; bench/run.sh runs it and
// prints the ratios, and bench/README.md says how to read them.
package bench
