package logs

import (
	"context"
	"log/slog"

	"github.com/gcprobe/probe/heapprofile"
	"github.com/gcprobe/probe/stackcapture"
)

// Operator logs an operator cause named or gone, at Warn, as the
// detector events are.
func Operator(l *slog.Logger, c heapprofile.OperatorCause, named bool) {
	msg := "gcprobe: detector cleared"
	if named {
		msg = "gcprobe: detector firing"
	}
	attrs := []slog.Attr{
		slog.String("detector", c.Name),
		slog.Float64("value", c.Value),
		slog.Float64("threshold", c.Threshold),
	}
	if named {
		attrs = append(attrs, slog.String("cause", c.Words), slog.String("fix", c.Fix))
		if c.Site != (stackcapture.Frame{}) {
			attrs = append(attrs, slog.String("line", c.Site.Label()))
		}
	}
	l.LogAttrs(context.Background(), slog.LevelWarn, msg, attrs...)
}
