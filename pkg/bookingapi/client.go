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

// maxErrorBytes bounds the body of an answer that carries no hint: an
// error message at most.
const maxErrorBytes = 64 << 10

// Client posts bookings, and the outcomes of the requests booked, to one
// sidecar's booking API. It is safe for
// concurrent use.
type Client struct {
	// url and outcomesURL are the booking and outcome routes.
	url, outcomesURL string
	http             *http.Client
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
		c.url, c.outcomesURL = "http://localhost"+Path, "http://localhost"+OutcomesPath
		return c, nil
	}
	if !strings.HasPrefix(base, "http://") && !strings.HasPrefix(base, "https://") {
		return nil, fmt.Errorf("booking API address %q: want http://HOST:PORT or unix:///PATH", base)
	}
	base = strings.TrimSuffix(base, "/")
	c.url, c.outcomesURL = base+Path, base+OutcomesPath
	return c, nil
}

// Book posts b and returns the hint message the sidecar answered (a 200),
// for the router to carry to the booked worker (pkg/dispatch.CarryHint), or
// nil when the booking has no hint (a 204). Any other answer is an error
// that carries the sidecar's status and message.
func (c *Client) Book(ctx context.Context, b *Booking) ([]byte, error) {
	a, err := c.BookAnswer(ctx, b)
	return a.Message, err
}

// BookAnswer is Book with the hash of the config that booked b, which a
// router reports back with the request's Outcome (ReportOutcome).
func (c *Client) BookAnswer(ctx context.Context, b *Booking) (Answer, error) {
	body, err := json.Marshal(b)
	if err != nil {
		return Answer{}, err
	}
	resp, msg, err := c.post(ctx, c.url, body, maxAnswerBytes)
	if err != nil {
		return Answer{}, err
	}
	a := Answer{ConfigHash: resp.Header.Get(HeaderConfigHash)}
	switch resp.StatusCode {
	case http.StatusOK:
		a.Message = msg
		return a, nil
	case http.StatusNoContent:
		return a, nil
	}
	return Answer{}, fmt.Errorf("the sidecar answered %s: %s", resp.Status, bytes.TrimSpace(msg))
}

// ReportOutcome posts o, what became of a booked request, to the sidecar
// (POST /v1/outcomes); the sidecar answers 204. Any other answer is an
// error that carries the sidecar's status and message.
func (c *Client) ReportOutcome(ctx context.Context, o *Outcome) error {
	body, err := json.Marshal(o)
	if err != nil {
		return err
	}
	resp, msg, err := c.post(ctx, c.outcomesURL, body, maxErrorBytes)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("the sidecar answered the outcome %s: %s", resp.Status, bytes.TrimSpace(msg))
	}
	return nil
}

// post posts a JSON body to url and returns the answer, its body read (at
// most limit bytes) and closed.
func (c *Client) post(ctx context.Context, url string, body []byte, limit int64) (*http.Response, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	msg, err := io.ReadAll(io.LimitReader(resp.Body, limit))
	if err != nil {
		return nil, nil, fmt.Errorf("reading the sidecar's answer: %w", err)
	}
	return resp, msg, nil
}
