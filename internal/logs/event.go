package logs

import (
	"context"
	"log/slog"
	"time"

	"github.com/gcprobe/probe/memstats"
)

// Event logs one detector event: "gcprobe: detector firing" or
// "gcprobe: detector cleared", with the detector, its value and threshold,
// since when its condition held, and, for finalizer_blocked, the kind and
// site of the callback; for a firing cause of GC work, the cause, its fix
// and its first line (line); and the events dropped before it (dropped).
func Event(l *slog.Logger, e memstats.Event, line string, dropped uint64) {
	msg := "gcprobe: detector cleared"
	if e.Firing {
		msg = "gcprobe: detector firing"
	}
	attrs := make([]slog.Attr, 0, 8)
	attrs = append(attrs,
		slog.String("detector", e.Detector),
		slog.Float64("value", e.Value),
		slog.Float64("threshold", e.Threshold),
		slog.Time("since", e.Since),
	)
	if e.Site != "" {
		attrs = append(attrs, slog.String("kind", e.Kind), slog.String("site", e.Site))
	}
	if c := e.Cause(); c != "" && e.Firing {
		attrs = append(attrs, slog.String("cause", c))
		if e.Fix != "" {
			attrs = append(attrs, slog.String("fix", e.Fix))
		}
		if line != "" {
			attrs = append(attrs, slog.String("line", line))
		}
	}
	if !e.Since.IsZero() && !e.Time.IsZero() {
		attrs = append(attrs, slog.Duration("for", e.Time.Sub(e.Since).Round(time.Millisecond)))
	}
	if dropped > 0 {
		attrs = append(attrs, slog.Uint64("dropped", dropped))
	}
	l.LogAttrs(context.Background(), slog.LevelWarn, msg, attrs...)
}
