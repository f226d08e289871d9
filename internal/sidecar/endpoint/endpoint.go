// Package endpoint checks hint endpoints: where the sidecar sends traffic
// on a worker's word. The registry checks them when a worker registers,
// delivery's dialer checks the addresses they resolve to (CheckDialAddress).
//
// It imports only the standard library.
package endpoint

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Hint endpoints are where the sidecar sends traffic on a worker's word, so
// they are checked where they are registered, and the addresses they
// resolve to where they are dialled:
//
//   - no credentials in the URL (they would end up in logs and listings);
//   - never an address that reaches the router pod itself or the cloud
//     around it: an unspecified address (0.0.0.0 and the rest of 0.0.0.0/8
//     reach the local host), link-local (169.254.0.0/16 holds the cloud
//     metadata service, fe80::/10 its IPv6 neighbours), the metadata
//     addresses outside it (fd00:ec2::254, 100.100.100.200, 168.63.129.16
//     and all of 192.0.0.0/24, where 192.0.0.192 is one), multicast and
//     broadcast, and any IPv6 address that carries one of those, or a
//     loopback address, inside it (IPv4-mapped, IPv4-compatible, NAT64's
//     64:ff9b::/96 and 64:ff9b:1::/48);
//   - never loopback (127.0.0.0/8, ::1, localhost, a name the hosts file
//     gives a loopback address), nor the pod's own addresses (its
//     interfaces') or the sidecar's own listeners, unless a Policy allows
//     loopback for standalone development; even then, never the sidecar's
//     own listeners;
//   - a numeric host only in its canonical form (127.0.0.1, not
//     2130706433, 0177.0.0.1, 127.1 or 0x7f.1, which some resolvers read
//     as loopback);
//   - from a worker pod, only a port and a path on that pod's own IP,
//     unless the sidecar runs with --allow-absolute-hint-endpoints.

// metadataAddrs are cloud metadata services outside the link-local ranges
// and 192.0.0.0/24.
var metadataAddrs = []netip.Addr{
	netip.MustParseAddr("fd00:ec2::254"),   // AWS, IPv6
	netip.MustParseAddr("100.100.100.200"), // Alibaba Cloud
	netip.MustParseAddr("168.63.129.16"),   // Azure's host wire server
}

// Refused IPv4 ranges beyond what netip names.
var (
	thisNetwork = netip.MustParsePrefix("0.0.0.0/8")     // 0.x.y.z: "this host on this network"
	ietfSpecial = netip.MustParsePrefix("192.0.0.0/24")  // IETF protocol assignments; 192.0.0.192 is Oracle Cloud's metadata
	broadcast   = netip.MustParseAddr("255.255.255.255") // limited broadcast
	// IPv6 ranges that carry an IPv4 address.
	nat64WellKnown = netip.MustParsePrefix("64:ff9b::/96")   // RFC 6052: the IPv4 address in the last 32 bits
	nat64Local     = netip.MustParsePrefix("64:ff9b:1::/48") // RFC 8215: any RFC 6052 prefix length
	v4Compatible   = netip.MustParsePrefix("::/96")          // deprecated IPv4-compatible addresses
)

// staticRefusal says why no hint may ever be sent to ip, whatever the
// policy, or "". It does not look inside IPv6 addresses that carry IPv4
// ones; embedded does.
func staticRefusal(ip netip.Addr) string {
	ip = ip.WithZone("").Unmap()
	switch {
	case ip.IsUnspecified(), thisNetwork.Contains(ip):
		return "an unspecified address (it reaches the local host)"
	case ip.IsLinkLocalUnicast():
		return "a link-local address (the cloud metadata service lives there)"
	case ip.IsMulticast(), ip.IsLinkLocalMulticast(), ip.IsInterfaceLocalMulticast(), ip == broadcast:
		return "a multicast or broadcast address"
	case ietfSpecial.Contains(ip):
		return "in 192.0.0.0/24 (IETF special use; cloud metadata such as 192.0.0.192)"
	}
	for _, m := range metadataAddrs {
		if ip == m {
			return "a cloud metadata address"
		}
	}
	return ""
}

// embedded returns the IPv4 addresses an IPv6 address may stand for: the
// one of an IPv4-compatible address, and the ones NAT64 translates it to
// under each RFC 6052 prefix length its prefix allows.
func embedded(ip netip.Addr) []netip.Addr {
	ip = ip.WithZone("")
	if !ip.Is6() || ip.Is4In6() {
		return nil
	}
	b := ip.As16()
	v4 := func(i ...int) netip.Addr { return netip.AddrFrom4([4]byte{b[i[0]], b[i[1]], b[i[2]], b[i[3]]}) }
	switch {
	case nat64WellKnown.Contains(ip):
		return []netip.Addr{v4(12, 13, 14, 15)}
	case nat64Local.Contains(ip):
		// RFC 6052 section 2.2: /48, /56, /64 skip the u octet (byte 8);
		// /96 is the last 32 bits.
		// An embedding in 0.0.0.0/8 is a prefix length not in use there.
		var out []netip.Addr
		for _, a := range []netip.Addr{v4(6, 7, 9, 10), v4(7, 9, 10, 11), v4(9, 10, 11, 12), v4(12, 13, 14, 15)} {
			if !thisNetwork.Contains(a) {
				out = append(out, a)
			}
		}
		return out
	case v4Compatible.Contains(ip) && !ip.IsUnspecified() && !ip.IsLoopback():
		return []netip.Addr{v4(12, 13, 14, 15)}
	}
	return nil
}

// ErrRefusedAddress is the dialer's refusal.
var ErrRefusedAddress = errors.New("hint endpoint resolves to a refused address")

// CheckDialAddress is the check of a Control hook with no Policy: the
// refusals that hold whatever the policy (loopback passes). A sidecar
// dials through its Policy's CheckDial.
func CheckDialAddress(network, address string, c syscall.RawConn) error {
	return (*Policy)(nil).CheckDial(network, address, c)
}

// Policy is one sidecar's rules for hint endpoints, beyond those that
// always hold: whether loopback is allowed, and its own addresses. The
// zero Policy refuses loopback; a nil *Policy applies only the rules that
// always hold (loopback passes), for tests of other rooms. Its methods may
// be called from any goroutine.
type Policy struct {
	// AllowLoopback takes loopback endpoints: standalone development only,
	// where the simulated workers run on the same machine
	// (--allow-loopback-hint-endpoints). The sidecar's own listeners stay
	// refused.
	AllowLoopback bool
	// HostsFile is the hosts file whose names are checked at registration
	// (names that map to a refused address are refused); "" means
	// /etc/hosts.
	HostsFile string

	mu sync.RWMutex
	// own are the pod's own addresses, other than loopback ones (its
	// interfaces', POD_IP's).
	own []netip.Addr
	// listeners are the sidecar's own TCP listeners; an unspecified
	// address stands for every local one.
	listeners []netip.AddrPort
}

// SetOwn records the sidecar's own addresses: own are the pod's IPs (any
// port), listeners its TCP listeners.
func (p *Policy) SetOwn(own []netip.Addr, listeners []netip.AddrPort) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.own = p.own[:0]
	for _, a := range own {
		if a = a.WithZone("").Unmap(); !a.IsLoopback() {
			p.own = append(p.own, a)
		}
	}
	p.listeners = slices.Clone(listeners)
}

// LocalAddrs are the addresses of this machine's (this pod's) interfaces.
func LocalAddrs() []netip.Addr {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	var out []netip.Addr
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok {
				out = append(out, ip.Unmap())
			}
		}
	}
	return out
}

// refused says why no hint may be sent to ip (port 0: any port), or "".
func (p *Policy) refused(ip netip.Addr, port uint16) string {
	ip = ip.WithZone("").Unmap()
	if why := staticRefusal(ip); why != "" {
		return why
	}
	for _, v4 := range embedded(ip) {
		if v4.IsLoopback() {
			return "an IPv6 address that carries the loopback address " + v4.String()
		}
		if why := p.refused(v4, port); why != "" {
			return "an IPv6 address that carries " + v4.String() + ", " + why
		}
	}
	if p == nil {
		return ""
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	local := ip.IsLoopback() || slices.Contains(p.own, ip)
	for _, l := range p.listeners {
		if (port == 0 || port == l.Port()) && (l.Addr().Unmap() == ip || (l.Addr().IsUnspecified() && local)) {
			return "the sidecar's own listener " + l.String()
		}
	}
	switch {
	case ip.IsLoopback() && !p.AllowLoopback:
		return "a loopback address (it reaches the router pod itself; only standalone development allows it, with --allow-loopback-hint-endpoints)"
	case slices.Contains(p.own, ip):
		return "one of the router pod's own addresses"
	}
	return ""
}

// CheckDial is a dialer's Control hook: it runs after the name is resolved
// and before connect, so a host name that resolves to a refused address
// (DNS rebinding to loopback, say) sends nothing there.
func (p *Policy) CheckDial(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrRefusedAddress, address, err)
	}
	if why := p.refused(ap.Addr(), ap.Port()); why != "" {
		return fmt.Errorf("%w: %s is %s", ErrRefusedAddress, address, why)
	}
	return nil
}

// Check checks an absolute hint endpoint URL as a registration does: its
// form (ValidateHintEndpoint) and its host under the policy.
func (p *Policy) Check(raw string) error {
	if err := ValidateHintEndpoint(raw); err != nil {
		return err
	}
	u, _ := url.Parse(raw) // parsed by ValidateHintEndpoint
	host := u.Hostname()
	var port uint16
	if n, err := strconv.ParseUint(u.Port(), 10, 16); err == nil {
		port = uint16(n)
	} else if u.Port() == "" {
		port = map[string]uint16{"http": 80, "https": 443}[u.Scheme]
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		if why := p.refused(ip, port); why != "" {
			return fmt.Errorf("hint_endpoint %s is %s", Shown(raw), why)
		}
		return nil
	}
	name := strings.ToLower(strings.TrimSuffix(host, "."))
	if name == "localhost" || strings.HasSuffix(name, ".localhost") {
		// RFC 6761: localhost and its subdomains are loopback, whatever
		// the hosts file says.
		for _, ip := range []netip.Addr{netip.AddrFrom4([4]byte{127, 0, 0, 1}), netip.IPv6Loopback()} {
			if why := p.refused(ip, port); why != "" {
				return fmt.Errorf("hint_endpoint %s names localhost, %s", Shown(raw), why)
			}
		}
		return nil
	}
	if p == nil {
		return nil
	}
	for _, ip := range hostsAddrs(p.HostsFile, name) {
		if why := p.refused(ip, port); why != "" {
			return fmt.Errorf("hint_endpoint %s names a host the hosts file maps to %s, %s", Shown(raw), ip, why)
		}
	}
	return nil
}

// maxHostsFileBytes caps the hosts file read at a registration.
const maxHostsFileBytes = 1 << 20

// hostsAddrs are the addresses a hosts file gives name (lower case, no
// trailing dot); "" reads /etc/hosts. An unreadable file gives none: the
// dialer's check still holds.
func hostsAddrs(path, name string) []netip.Addr {
	if path == "" {
		path = "/etc/hosts"
	}
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []netip.Addr
	sc := bufio.NewScanner(io.LimitReader(f, maxHostsFileBytes))
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue
		}
		ip, err := netip.ParseAddr(fields[0])
		if err != nil {
			continue
		}
		for _, h := range fields[1:] {
			if strings.ToLower(strings.TrimSuffix(h, ".")) == name {
				out = append(out, ip)
			}
		}
	}
	return out
}

// numericHost reports whether host is a number some resolver would read as
// an IPv4 address although it is not in canonical dotted form: its last
// label (a trailing dot aside) is decimal digits or 0x hex, as the WHATWG
// URL standard's "ends in a number" says.
func numericHost(host string) bool {
	if _, err := netip.ParseAddr(host); err == nil {
		return false
	}
	host = strings.TrimSuffix(host, ".")
	last := host[strings.LastIndexByte(host, '.')+1:]
	if last == "" {
		return false
	}
	if strings.Trim(last, "0123456789") == "" {
		return true
	}
	hex, ok := strings.CutPrefix(strings.ToLower(last), "0x")
	return ok && strings.Trim(hex, "0123456789abcdef") == ""
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

// ValidateHintEndpoint checks the form of an absolute hint endpoint URL
// and the rules that hold whatever the policy; Policy.Check adds the
// policy's.
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
	host := u.Hostname()
	if numericHost(host) {
		return fmt.Errorf("hint_endpoint %s has a numeric host that is not a canonical IP address (write IPv4 as four decimal numbers, such as 10.0.0.5)", Shown(raw))
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		if why := (*Policy)(nil).refused(ip, 0); why != "" {
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
