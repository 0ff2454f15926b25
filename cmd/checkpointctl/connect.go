package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	neturl "net/url"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/checkpointd/checkpointd/checkpoint"
)

// dialTimeout bounds the NATS handshake: a checkpointd on loopback or a LAN answers in
// milliseconds, and a port that is not NATS (checkpointd's HTTP port, say) never does, so waiting
// the whole --timeout there only delays the hint below.
const dialTimeout = 3 * time.Second

// Default ports of checkpointd (cmd/checkpointd: --nats-listen, --http-listen).
const (
	defaultNATSPort = "4222"
	defaultHTTPPort = "9333"
)

// unreachableHint adds what to do next to a failed connection that looks like "nothing (or no
// NATS) listening there"; other failures (a refused login, TLS) are returned as they are.
func unreachableHint(server string, err error) error {
	if !unreachable(err) {
		return err
	}
	url := checkpoint.PublicURL(server)
	hint := fmt.Sprintf("is checkpointd running on %s? start it with `checkpointd` (from the source: go run ./cmd/checkpointd), or name another with --server", url)
	if servesHTTP(server) {
		hint = fmt.Sprintf("%s is checkpointd's HTTP port (/metrics, /healthz), not NATS: its NATS port is %s by default (--server nats://127.0.0.1:%s)",
			url, defaultNATSPort, defaultNATSPort)
	}
	return fmt.Errorf("%w\n  %s", err, hint)
}

// unreachable tells "no server there" and "not a NATS server there" from other connect failures.
func unreachable(err error) bool {
	var ne net.Error
	return errors.Is(err, nats.ErrNoServers) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		(errors.As(err, &ne) && ne.Timeout())
}

// servesHTTP reports whether any URL of server names checkpointd's default HTTP port.
func servesHTTP(server string) bool {
	for _, s := range strings.Split(server, ",") {
		if u, err := neturl.Parse(strings.TrimSpace(s)); err == nil && u.Port() == defaultHTTPPort {
			return true
		}
	}
	return false
}
