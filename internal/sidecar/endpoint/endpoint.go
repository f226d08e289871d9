// Package endpoint checks hint endpoints: where the sidecar sends traffic
// on a worker's word. The registry checks them when a worker registers,
// delivery's dialer checks the addresses they resolve to (CheckDialAddress).
//
// It imports only the standard library.
package endpoint

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"
)

// Hint endpoints are where the sidecar sends traffic on a worker's word, so
// they are checked where they are registered, and the addresses they
// resolve to where they are dialled:
//
//   - no credentials in the URL (they would end up in logs and listings);
//   - never a link-local address (169.254.0.0/16 holds the cloud metadata
//     service, fe80::/10 its IPv6 neighbours), a known metadata address, an
//     unspecified address (0.0.0.0 reaches the local host) or a multicast
//     one;
//   - from a worker pod, only a port and a path on that pod's own IP,
//     unless the sidecar runs with --allow-absolute-hint-endpoints.

// metadataAddrs are cloud metadata services outside the link-local ranges.
var metadataAddrs = []netip.Addr{
	netip.MustParseAddr("fd00:ec2::254"),   // AWS, IPv6
	netip.MustParseAddr("100.100.100.200"), // Alibaba Cloud
}

// refusedAddr says why no hint may be sent to ip, or "".
func refusedAddr(ip netip.Addr) string {
	ip = ip.Unmap()
	switch {
	case ip.IsLinkLocalUnicast():
		return "a link-local address (the cloud metadata service lives there)"
	case ip.IsUnspecified():
		return "an unspecified address (it reaches the local host)"
	case ip.IsMulticast(), ip.IsLinkLocalMulticast(), ip.IsInterfaceLocalMulticast():
		return "a multicast address"
	}
	for _, m := range metadataAddrs {
		if ip.WithZone("") == m {
			return "a cloud metadata address"
		}
	}
	return ""
}

// ErrRefusedAddress is the dialer's refusal.
var ErrRefusedAddress = errors.New("hint endpoint resolves to a refused address")

// CheckDialAddress is the hint dialers' Control hook: it runs after the
// name is resolved and before connect, so a host name that resolves to a
// refused address sends nothing there.
func CheckDialAddress(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrRefusedAddress, address, err)
	}
	if why := refusedAddr(ap.Addr()); why != "" {
		return fmt.Errorf("%w: %s is %s", ErrRefusedAddress, address, why)
	}
	return nil
}

// Shown is an endpoint as errors and logs may show it: never with
// its credentials.
func Shown(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		if strings.Contains(raw, "@") {
			return "(an endpoint with credentials, not shown)"
		}
		return strconv.Quote(raw)
	}
	if u.User != nil {
		u.User = url.User("REDACTED")
	}
	return strconv.Quote(u.String())
}

// ValidateHintEndpoint checks an absolute hint endpoint URL.
func ValidateHintEndpoint(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Opaque != "" {
		return fmt.Errorf("hint_endpoint %s must be an absolute http or https URL", Shown(raw))
	}
	switch {
	case u.User != nil:
		return fmt.Errorf("hint_endpoint %s carries credentials in its URL; they are refused, never stored", Shown(raw))
	case u.RawQuery != "" || u.ForceQuery:
		return fmt.Errorf("hint_endpoint %s has a query; give a path only", Shown(raw))
	case u.Fragment != "":
		return fmt.Errorf("hint_endpoint %s has a fragment; give a path only", Shown(raw))
	}
	if ip, err := netip.ParseAddr(strings.Trim(u.Hostname(), "[]")); err == nil {
		if why := refusedAddr(ip); why != "" {
			return fmt.Errorf("hint_endpoint %s is %s", Shown(raw), why)
		}
	}
	return nil
}

// PodHintEndpoint turns a worker pod's hint-endpoint annotation into the
// URL hints are posted to. The annotation is ":PORT" or ":PORT/PATH" on
// the pod's own IP; an absolute URL is taken only when allowAbsolute.
func PodHintEndpoint(podIP, annotation string, allowAbsolute bool) (string, error) {
	if !strings.HasPrefix(annotation, ":") {
		if strings.HasPrefix(annotation, "http://") || strings.HasPrefix(annotation, "https://") {
			if !allowAbsolute {
				return "", fmt.Errorf("hint endpoint %s is an absolute URL: a worker pod gives a port and a path on its own IP (\":8081/v1/hints\"); absolute URLs need --allow-absolute-hint-endpoints", Shown(annotation))
			}
			return annotation, ValidateHintEndpoint(annotation)
		}
		return "", fmt.Errorf("hint endpoint %s must be a port and a path on the pod's own IP, such as \":8081/v1/hints\"", Shown(annotation))
	}
	port, path, _ := strings.Cut(annotation[1:], "/")
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != port {
		return "", fmt.Errorf("hint endpoint %s: the port must be a number from 1 to 65535, followed by nothing but a path", Shown(annotation))
	}
	for _, c := range path {
		if !pathChar(c) {
			return "", fmt.Errorf("hint endpoint %s: the path may hold letters, digits and -._~!$&'()*+,;=:@/ only (no query, fragment or escapes)", Shown(annotation))
		}
	}
	ip, err := netip.ParseAddr(podIP)
	if err != nil {
		return "", fmt.Errorf("pod IP %q is not an IP address", podIP)
	}
	host := net.JoinHostPort(ip.String(), port)
	ep := (&url.URL{Scheme: "http", Host: host, Path: "/" + path}).String()
	// Defence in depth: whatever the path, the URL must name the pod.
	if u, err := url.Parse(ep); err != nil || u.Host != host || u.User != nil {
		return "", fmt.Errorf("hint endpoint %s does not resolve to the pod's own IP", Shown(annotation))
	}
	return ep, ValidateHintEndpoint(ep)
}

// pathChar reports whether c may appear in an annotation's path: RFC 3986
// pchar and '/', without percent-escapes.
func pathChar(c rune) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.ContainsRune("-._~!$&'()*+,;=:@/", c)
}
