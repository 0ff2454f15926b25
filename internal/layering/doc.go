// Package layering holds no code: its test checks, with `go list -deps`, that the packages keep
// to the layers README.md's Architecture section draws (the domain knows nothing of NATS or of
// the protocol, the SDK nothing of the daemon's engine, the daemon's parts only the parts beneath
// them), so that a stray import fails a test instead of waiting for a reviewer.
package layering
