package main

import (
	"errors"
	"flag"

	"github.com/nats-io/nats.go"
)

// tlsFlags are the global flags for a deployment that serves TLS (checkpointd --tls-cert) or
// requires client certificates (checkpointd --tls-client-ca).
type tlsFlags struct {
	ca, cert, key string
}

func (f *tlsFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.ca, "tls-ca", "", "verify the server's TLS certificate with this CA (PEM) and require TLS")
	fs.StringVar(&f.cert, "tls-cert", "", "client certificate (PEM) for a server that requires mutual TLS (with --tls-key)")
	fs.StringVar(&f.key, "tls-key", "", "the private key of --tls-cert (PEM)")
}

// options are the nats.go options the flags ask for.
func (f *tlsFlags) options() ([]nats.Option, error) {
	if (f.cert == "") != (f.key == "") {
		return nil, usageErr(errors.New("--tls-cert and --tls-key: give both or neither"))
	}
	var opts []nats.Option
	if f.ca != "" {
		opts = append(opts, nats.RootCAs(f.ca))
	}
	if f.cert != "" {
		opts = append(opts, nats.ClientCert(f.cert, f.key))
	}
	return opts, nil
}

// registerDestination registers migrate's --to-tls-ca, --to-tls-cert and --to-tls-key.
func (f *tlsFlags) registerDestination(fs *flag.FlagSet) {
	fs.StringVar(&f.ca, "to-tls-ca", "", "CA (PEM) of the destination's TLS certificate (default: --tls-ca)")
	fs.StringVar(&f.cert, "to-tls-cert", "", "client certificate (PEM) for the destination (default: --tls-cert)")
	fs.StringVar(&f.key, "to-tls-key", "", "the private key of --to-tls-cert (default: --tls-key)")
}

// or is f where any of its flags is given, else def: a destination named with none of its own
// TLS flags is reached as the source is.
func (f tlsFlags) or(def tlsFlags) tlsFlags {
	if f != (tlsFlags{}) {
		return f
	}
	return def
}
