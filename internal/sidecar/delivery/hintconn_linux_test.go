package delivery

import (
	"net"
	"testing"
	"time"
)

func TestPeekClosed(t *testing.T) {
	dial := func() (client, server net.Conn) {
		t.Helper()
		return connPair(t, func(addr string) (net.Conn, error) { return net.Dial("tcp", addr) })
	}
	// waitFor polls: the peer's close or data reaches the client's socket
	// a moment after the peer acts.
	waitFor := func(c net.Conn, want bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			closed, ok := peekClosed(c)
			if !ok {
				t.Fatal("no peek on a TCP connection")
			}
			if closed == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("peekClosed = %v, want %v", closed, want)
			}
			time.Sleep(time.Millisecond)
		}
	}

	c, _ := dial()
	if closed, ok := peekClosed(c); !ok || closed {
		t.Fatalf("open, silent connection: closed=%v ok=%v", closed, ok)
	}

	c, s := dial()
	s.Close()
	waitFor(c, true)

	c, s = dial()
	s.Write([]byte("HTTP/1.1 200 OK\r\n\r\n"))
	waitFor(c, true)
	// A peek consumes nothing: the bytes are still there to read.
	buf := make([]byte, 4)
	if n, err := c.Read(buf); err != nil || string(buf[:n]) != "HTTP" {
		t.Fatalf("read after peek: %q %v", buf[:n], err)
	}
}
