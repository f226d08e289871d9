//go:build !linux

package loadgen

import "time"

func pinPacer() (unpin func()) { return func() {} }

// sleepUntil returns at t or after, at the resolution of Go's timers.
func sleepUntil(t time.Time) {
	if d := time.Until(t); d > 0 {
		time.Sleep(d)
	}
}
