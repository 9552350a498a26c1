module github.com/gcprobe/probe/cmd/finalizercheck

go 1.26.0

require golang.org/x/tools v0.52.0

require (
	github.com/gcprobe/probe v0.0.0-00010101000000-000000000000
	github.com/google/go-cmp v0.7.0 // indirect
	golang.org/x/mod v0.42.0 // indirect
	golang.org/x/sync v0.24.0 // indirect
)

// Development and CI build against this checkout; a user of this module
// gets the versions required above (replace applies to the main module only).
replace github.com/gcprobe/probe => ../..
