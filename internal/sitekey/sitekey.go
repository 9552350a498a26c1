// Package sitekey names a site of a finalizerwatch Snapshot the way the
// ledger's Snapshot merges them: by kind, function, file and line, not by
// PC, so that a line inlined into two callers is one site. The root
// package's growing-site log, history and page, and finalizertest's
// baselines, key their per-site state by it.
package sitekey

import "github.com/gcprobe/probe/finalizerwatch"

// Key is a site of one kind: finalizers' or cleanups'.
type Key struct {
	Kind     finalizerwatch.Kind
	Function string
	File     string
	Line     int
}

// Of returns the key of s.
func Of(s *finalizerwatch.SiteStats) Key {
	return Key{s.Kind, s.Site.Function, s.Site.File, s.Site.Line}
}
