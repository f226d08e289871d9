//go:build race

package dispatch

// raceEnabled: the race detector's sync.Pool drops pooled items at random,
// so a booking's allocations cannot be counted under it.
const raceEnabled = true
