package endpoint

import (
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
