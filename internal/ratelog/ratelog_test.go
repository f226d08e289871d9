package ratelog

import (
	"testing"
	"time"
)

// TestLimiter: one log per interval, and the next once it has passed.
func TestLimiter(t *testing.T) {
	l := Limiter{Interval: 50 * time.Millisecond}
	if !l.Allow() {
		t.Fatal("the first log was held back")
	}
	for range 100 {
		if l.Allow() {
			t.Fatal("a second log within the interval went out")
		}
	}
	time.Sleep(60 * time.Millisecond)
	if !l.Allow() {
		t.Fatal("no log once the interval passed")
	}
}
