//go:build !linux

package delivery

import "net"

// peekClosed has no non-blocking peek here; hintConn.peerClosed falls back
// to a read with a short deadline.
func peekClosed(net.Conn) (closed, ok bool) { return false, false }
