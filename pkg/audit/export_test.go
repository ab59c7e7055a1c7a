package audit

import "time"

// WithClock sets the clock a Recorder reads (tests of the repeat window).
func WithClock(c Config, now func() time.Time) Config {
	c.now = now
	return c
}
