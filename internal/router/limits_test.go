package router

import (
	"fmt"
	"net"
	"runtime"
	"testing"
	"time"
)

// heapInUse is the live heap after a collection.
func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// stallBookings opens n connections to the booking API that each send a
// request head declaring a body of declared bytes, then one byte of it, and
// stall. They close when the test ends.
func stallBookings(t *testing.T, addr string, n int, declared int) []net.Conn {
	t.Helper()
	conns := make([]net.Conn, 0, n)
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	head := fmt.Sprintf("POST /v1/bookings HTTP/1.1\r\nHost: sidecar\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{", declared)
	for range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		if _, err := c.Write([]byte(head)); err != nil {
			t.Fatal(err)
		}
	}
	return conns
}

// TestStalledBookingsDoNotPreallocate: bookings that declare a 1 MiB body
// and send one byte of it cost what arrived, not what was declared. Before
// the fix readBody allocated Content-Length up front: 64 such bookings held
// 64 MiB (1,000 held 1.08 GB).
func TestStalledBookingsDoNotPreallocate(t *testing.T) {
	s := startSidecarWithConfig(t, testCatalog(t), dispatchConfig, nil)
	const n = 64
	before := heapInUse()
	stallBookings(t, s.BookingAddr(), n, MaxBookingBytes)
	// Each handler is reading its body once the server has seen n
	// requests; give them the time a preallocation would take, and check
	// the heap stays low all along.
	const bound = 16 << 20
	deadline := time.Now().Add(500 * time.Millisecond)
	for time.Now().Before(deadline) {
		if grown := int64(heapInUse()) - int64(before); grown > bound {
			t.Fatalf("%d stalled bookings declaring %d bytes grew the heap by %d MiB, over %d MiB", n, MaxBookingBytes, grown>>20, bound>>20)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("%d stalled bookings declaring 1 MiB: heap grew by %d KiB", n, (int64(heapInUse())-int64(before))>>10)
}
