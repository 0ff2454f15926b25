package service

import "testing"

// WithoutForkOp makes the daemons the test starts answer no fork requests, as a daemon before
// checkpointd 0.6 (no responders on cp.api.<ns>.fork).
func WithoutForkOp(t *testing.T) {
	old := forkSubject
	forkSubject = "cp.test.no-fork-op.*"
	t.Cleanup(func() { forkSubject = old })
}
