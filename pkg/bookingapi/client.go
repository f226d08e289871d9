package bookingapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// DefaultTimeout bounds a booking's round trip when NewClient is given none.
const DefaultTimeout = 5 * time.Second

// maxAnswerBytes bounds the body of a sidecar's answer that Book reads: a
// hint for the longest booking the sidecar accepts fits well within it.
const maxAnswerBytes = 16 << 20

// Client posts bookings to one sidecar's booking API. It is safe for
// concurrent use.
type Client struct {
	url  string
	http *http.Client
}

// NewClient returns a client of the booking API at base: http://HOST:PORT
// for a TCP listener, or unix:///PATH for the sidecar's Unix socket. A
// timeout of 0 means DefaultTimeout.
func NewClient(base string, timeout time.Duration) (*Client, error) {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	c := &Client{http: &http.Client{Timeout: timeout}}
	if sock, ok := strings.CutPrefix(base, "unix://"); ok {
		if sock == "" {
			return nil, fmt.Errorf("booking API address %q: unix:// needs the socket's path", base)
		}
		var d net.Dialer
		c.http.Transport = &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return d.DialContext(ctx, "unix", sock)
		}}
		c.url = "http://localhost" + Path
		return c, nil
	}
	if !strings.HasPrefix(base, "http://") && !strings.HasPrefix(base, "https://") {
		return nil, fmt.Errorf("booking API address %q: want http://HOST:PORT or unix:///PATH", base)
	}
	c.url = strings.TrimSuffix(base, "/") + Path
	return c, nil
}

// Book posts b and returns the hint message the sidecar answered (a 200),
// for the router to carry to the booked worker (pkg/dispatch.CarryHint), or
// nil when the booking has no hint (a 204). Any other answer is an error
// that carries the sidecar's status and message.
func (c *Client) Book(ctx context.Context, b *Booking) ([]byte, error) {
	body, err := json.Marshal(b)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	msg, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	if err != nil {
		return nil, fmt.Errorf("reading the booking answer: %w", err)
	}
	switch resp.StatusCode {
	case http.StatusOK:
		return msg, nil
	case http.StatusNoContent:
		return nil, nil
	}
	return nil, fmt.Errorf("the sidecar answered %s: %s", resp.Status, bytes.TrimSpace(msg))
}
