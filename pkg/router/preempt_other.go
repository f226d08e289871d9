//go:build !linux

package router

// threadSwitches is not available here: overruns are never excused.
func threadSwitches() (voluntary, involuntary int64, ok bool) { return 0, 0, false }
