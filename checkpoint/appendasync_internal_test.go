package checkpoint

import "testing"

// A group's items skip compression only on a loopback connection: an address that is not one,
// a name, or none (not connected) keeps WithCompressFrom's threshold.
func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:4222": true, "127.0.0.53:4222": true, "[::1]:4222": true,
		"10.0.0.7:4222": false, "[2001:db8::1]:4222": false, "localhost:4222": false, "": false, "pipe": false,
	} {
		if got := isLoopback(addr); got != want {
			t.Errorf("isLoopback(%q) = %v, want %v", addr, got, want)
		}
	}
}
