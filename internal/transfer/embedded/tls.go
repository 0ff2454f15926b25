package embedded

import (
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats-server/v2/server"
)

// ServerTLS is the TLS of the embedded server's client port. The zero value serves plain TCP.
//
// The daemon's own connection is in-process (no socket), so it needs no certificate: nats-server
// never asks an in-process client for TLS, with or without ClientCAFile.
type ServerTLS struct {
	CertFile string // the server's certificate chain (PEM)
	KeyFile  string // its private key (PEM)
	// ClientCAFile, when set, turns on mutual TLS: every client must present a certificate signed
	// by a CA in this file (PEM), or the handshake is refused.
	ClientCAFile string
}

// Enabled reports whether any TLS setting was given.
func (t ServerTLS) Enabled() bool { return t != ServerTLS{} }

// applyServerTLS makes opts require TLS on the client port as t says; nothing when t is empty.
// Errors name the flag (and the file) that could not be used.
func applyServerTLS(opts *server.Options, t ServerTLS) error {
	if !t.Enabled() {
		return nil
	}
	if t.CertFile == "" || t.KeyFile == "" {
		return errors.New("TLS: --tls-cert and --tls-key are needed together (--tls-client-ca adds mutual TLS to them)")
	}
	tc, err := server.GenTLSConfig(&server.TLSConfigOpts{
		CertFile: t.CertFile,
		KeyFile:  t.KeyFile,
		CaFile:   t.ClientCAFile,
		Verify:   t.ClientCAFile != "",
	})
	if err != nil {
		return fmt.Errorf("TLS (--tls-cert %s, --tls-key %s, --tls-client-ca %q): %w", t.CertFile, t.KeyFile, t.ClientCAFile, err)
	}
	opts.TLSConfig = tc
	opts.TLS = true
	opts.TLSVerify = t.ClientCAFile != ""
	opts.TLSTimeout = 2 // seconds, nats-server's default for a handshake
	return nil
}

// InProcessURL is the URL to give nats.Connect with nats.InProcessServer(s). It is never tls://
// (s.ClientURL() is, when TLS is on): that scheme makes nats.go insist on a TLS handshake, which
// the in-process connection neither needs nor gets.
func InProcessURL(s *server.Server) string {
	return strings.Replace(s.ClientURL(), "tls://", "nats://", 1)
}
