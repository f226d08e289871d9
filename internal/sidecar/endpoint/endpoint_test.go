package endpoint

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDialRefusesLinkLocal: a name that resolves to a refused address is
// stopped by the dialer's check before connect; the check is called here
// directly, so no packet leaves.
func TestDialRefusesLinkLocal(t *testing.T) {
	for _, addr := range []string{"169.254.169.254:80", "[fe80::1%lo]:80", "0.0.0.0:80", "[fd00:ec2::254]:80"} {
		if err := CheckDialAddress("tcp4", addr, nil); err == nil {
			t.Errorf("dial to %s allowed", addr)
		}
	}
	for _, addr := range []string{"127.0.0.1:80", "[::1]:80", "10.0.0.5:8081"} {
		if err := CheckDialAddress("tcp", addr, nil); err != nil {
			t.Errorf("dial to %s refused: %v", addr, err)
		}
	}
}

// strictPolicy is a router pod's policy: pod IP 10.1.2.3, the booking API
// on loopback, the ops listener on the pod IP.
func strictPolicy(t *testing.T, allowLoopback bool) *Policy {
	t.Helper()
	hosts := filepath.Join(t.TempDir(), "hosts")
	if err := os.WriteFile(hosts, []byte("127.0.0.1 localhost\n::1 ip6-localhost\n127.0.1.1 myhost.example myhost # the machine's name\n10.1.2.3 router-0\n10.9.9.9 decode-9\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := &Policy{AllowLoopback: allowLoopback, HostsFile: hosts}
	p.SetOwn([]netip.Addr{netip.MustParseAddr("10.1.2.3"), netip.MustParseAddr("127.0.0.1")},
		[]netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:8790"), netip.MustParseAddrPort("10.1.2.3:8791"), netip.MustParseAddrPort("[::]:8792")})
	return p
}

// TestPolicyCheck: every spelling of the router pod itself, of the cloud
// metadata services, and every non-canonical numeric host is refused at
// registration, with an error that says why; nothing is resolved but the
// hosts file, nothing is sent.
func TestPolicyCheck(t *testing.T) {
	refusedEverywhere := []struct{ ep, why string }{
		{"http://[64:ff9b::a9fe:a9fe]/latest/meta-data", "169.254.169.254"},
		{"http://[64:ff9b::7f00:1]:15000/quitquitquit", "loopback"},
		{"http://[64:ff9b:1:a9fe:a9:fe00::]/latest", "169.254.169.254"}, // RFC 6052 /48 embedding
		{"http://[64:ff9b:1::a9fe:a9fe]/latest", "169.254.169.254"},     // /96 inside the local-use /48
		{"http://[::169.254.169.254]/latest", "169.254.169.254"},        // IPv4-compatible
		{"http://[::ffff:169.254.169.254]/latest", "link-local"},
		{"http://192.0.0.192/opc/v2/instance/", "192.0.0.0/24"},
		{"http://192.0.0.8/", "192.0.0.0/24"},
		{"http://100.100.100.200/latest/meta-data", "metadata"},
		{"http://[fd00:ec2::254]/latest/meta-data", "metadata"},
		{"http://168.63.129.16/machine", "metadata"},
		{"http://169.254.169.254/latest/meta-data", "link-local"},
		{"http://0.0.0.0:8081/", "unspecified"},
		{"http://0.1.2.3:8081/", "unspecified"},
		{"http://[::]:8081/", "unspecified"},
		{"http://224.0.0.1:8081/", "multicast"},
		{"http://255.255.255.255:8081/", "broadcast"},
		{"http://2130706433:15000/quitquitquit", "numeric host"},
		{"http://0177.0.0.1:15000/", "numeric host"},
		{"http://127.1:15000/", "numeric host"},
		{"http://0x7f.1:15000/", "numeric host"},
		{"http://0x7f000001/", "numeric host"},
		{"http://127.0.0.1.:15000/", "numeric host"},
		{"http://1.2.3.4.5/", "numeric host"},
		// The sidecar's own listeners, even where loopback is allowed.
		{"http://127.0.0.1:8790/v1/workers/x", "own listener"},
		{"http://localhost:8790/v1/workers/x", "own listener"},
		{"http://[::1]:8792/debug/pprof/", "own listener"},
		{"http://myhost.example:8792/", "own listener"},
		{"http://10.1.2.3:8791/metrics", "own"},
		{"http://router-0:8081/", "own addresses"},
		{"http://10.1.2.3:8081/v1/hints", "own addresses"},
	}
	refusedStrict := []struct{ ep, why string }{
		{"http://127.0.0.1:15000/quitquitquit", "loopback"},
		{"http://127.9.9.9:8081/", "loopback"},
		{"http://[::1]:8081/", "loopback"},
		{"http://[::ffff:127.0.0.1]:8081/", "loopback"},
		{"http://localhost:15000/", "localhost"},
		{"http://LOCALHOST.:15000/", "localhost"},
		{"http://api.localhost/", "localhost"},
		{"http://ip6-localhost:8081/", "hosts file"},
		{"http://myhost.example:8081/", "hosts file"},
	}
	allowed := []string{
		"http://10.0.0.5:8081/v1/hints",
		"https://decode-0.decode.llama.svc:8443/v1/hints",
		"http://decode-9:8081/v1/hints",
		"http://[2001:db8::5]:8081/v1/hints",
		"http://host-127.example:8081/",
	}
	for _, dev := range []bool{false, true} {
		p := strictPolicy(t, dev)
		check := func(ep, why string) {
			t.Helper()
			err := p.Check(ep)
			switch {
			case why == "" && err != nil:
				t.Errorf("loopback allowed %v: %s refused: %v", dev, ep, err)
			case why != "" && err == nil:
				t.Errorf("loopback allowed %v: %s accepted, want refused (%s)", dev, ep, why)
			case err != nil && !strings.Contains(err.Error(), why):
				t.Errorf("loopback allowed %v: %s: error %q does not say %q", dev, ep, err, why)
			}
		}
		for _, tc := range refusedEverywhere {
			check(tc.ep, tc.why)
		}
		for _, tc := range refusedStrict {
			if dev {
				check(tc.ep, "")
			} else {
				check(tc.ep, tc.why)
			}
		}
		for _, ep := range allowed {
			check(ep, "")
		}
	}
	// Without a policy, only the rules that always hold: the numeric
	// hosts and the metadata spellings still fail.
	for _, tc := range refusedEverywhere[:24] {
		if err := ValidateHintEndpoint(tc.ep); err == nil {
			t.Errorf("ValidateHintEndpoint(%s) accepted", tc.ep)
		}
	}
}

// TestPolicyCheckDial: the dialer's hook sees the resolved address, so a
// name that resolves to loopback or to the pod's own addresses at dial
// time (DNS rebinding) is refused before connect. Called directly: no
// packet leaves.
func TestPolicyCheckDial(t *testing.T) {
	strict, dev := strictPolicy(t, false), strictPolicy(t, true)
	for _, tc := range []struct {
		addr            string
		strictOK, devOK bool
	}{
		{"127.0.0.1:15000", false, true},
		{"127.3.4.5:80", false, true},
		{"[::1]:8081", false, true},
		{"[::ffff:127.0.0.1]:8081", false, true},
		{"127.0.0.1:8790", false, false}, // the booking listener
		{"[::1]:8792", false, false},     // a listener on every address
		{"10.1.2.3:8792", false, false},
		{"10.1.2.3:8081", false, false}, // the pod's own IP
		{"[64:ff9b::a9fe:a9fe]:80", false, false},
		{"[64:ff9b::7f00:1]:80", false, false},
		{"192.0.0.192:80", false, false},
		{"169.254.169.254:80", false, false},
		{"10.0.0.5:8081", true, true},
	} {
		for _, c := range []struct {
			p  *Policy
			ok bool
		}{{strict, tc.strictOK}, {dev, tc.devOK}} {
			err := c.p.CheckDial("tcp", tc.addr, nil)
			if c.ok != (err == nil) {
				t.Errorf("dial %s (loopback allowed %v): %v, want allowed %v", tc.addr, c.p.AllowLoopback, err, c.ok)
			}
			if err != nil && !errors.Is(err, ErrRefusedAddress) {
				t.Errorf("dial %s: %v is not ErrRefusedAddress", tc.addr, err)
			}
		}
	}
}
