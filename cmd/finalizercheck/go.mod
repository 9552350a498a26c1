module github.com/gcprobe/probe/cmd/finalizercheck

go 1.26.0

require golang.org/x/tools v0.39.0

require (
	golang.org/x/mod v0.30.0 // indirect
	golang.org/x/sync v0.18.0 // indirect
)
