package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/checkpointd/checkpointd/internal/sealing"
	"github.com/checkpointd/checkpointd/internal/transfer/embedded"
)

// securityConfig is TLS and encryption at rest: the embedded server's TLS and store key, the TLS
// of the connection to --nats-url, and checkpointd-side encryption per namespace.
type securityConfig struct {
	ServerTLS         embedded.ServerTLS // --tls-cert, --tls-key, --tls-client-ca (embedded server)
	EncryptionKeyFile string             // --encryption-key-file (embedded server)
	EncryptionCipher  string             // --encryption-cipher
	NATSTLSCA         string             // --nats-tls-ca
	NATSTLSCert       string             // --nats-tls-cert
	NATSTLSKey        string             // --nats-tls-key
	NamespaceKeysFile string             // --namespace-keys

	// Read from the files by load; never logged.
	encryption embedded.StoreEncryption
}

func (s *securityConfig) register(fs *flag.FlagSet) {
	fs.StringVar(&s.ServerTLS.CertFile, "tls-cert", "", "embedded server: serve TLS on the client port with this certificate (PEM; with --tls-key)")
	fs.StringVar(&s.ServerTLS.KeyFile, "tls-key", "", "embedded server: the private key of --tls-cert (PEM)")
	fs.StringVar(&s.ServerTLS.ClientCAFile, "tls-client-ca", "", "embedded server: require client certificates signed by this CA (PEM): mutual TLS")
	fs.StringVar(&s.EncryptionKeyFile, "encryption-key-file", "", "embedded server: encrypt the JetStream store with the key in this file (JetStream encryption; the store must have been created with it)")
	fs.StringVar(&s.EncryptionCipher, "encryption-cipher", "chacha", "embedded server: cipher of --encryption-key-file: chacha or aes")
	fs.StringVar(&s.NATSTLSCA, "nats-tls-ca", "", "--nats-url: verify the servers' certificates with this CA (PEM) and require TLS")
	fs.StringVar(&s.NATSTLSCert, "nats-tls-cert", "", "--nats-url: client certificate (PEM) for servers that require mutual TLS (with --nats-tls-key)")
	fs.StringVar(&s.NATSTLSKey, "nats-tls-key", "", "--nats-url: the private key of --nats-tls-cert (PEM)")
	fs.StringVar(&s.NamespaceKeysFile, "namespace-keys", "", `encrypt stored conversations per namespace (AES-256-GCM) with the keys in this JSON file: {"namespace": "<base64 32-byte key>" or ["<new>", "<old>", ...], "*": "<key for every other namespace>"}`)
}

// validate checks the flags against each other; embedded says whether no --nats-url was given.
func (s *securityConfig) validate(embedded bool) error {
	switch {
	case !embedded && s.ServerTLS.Enabled():
		return errors.New("--tls-cert, --tls-key, --tls-client-ca: the embedded server's TLS; with --nats-url use --nats-tls-ca, --nats-tls-cert, --nats-tls-key")
	case !embedded && s.EncryptionKeyFile != "":
		return errors.New("--encryption-key-file: encrypts the embedded server's store; with --nats-url configure JetStream encryption on the servers, or use --namespace-keys")
	case embedded && (s.NATSTLSCA != "" || s.NATSTLSCert != "" || s.NATSTLSKey != ""):
		return errors.New("--nats-tls-ca, --nats-tls-cert, --nats-tls-key: only meaningful with --nats-url (the embedded server takes --tls-cert, --tls-key)")
	case (s.NATSTLSCert == "") != (s.NATSTLSKey == ""):
		return errors.New("--nats-tls-cert and --nats-tls-key: give both or neither")
	case s.ServerTLS.Enabled() && (s.ServerTLS.CertFile == "" || s.ServerTLS.KeyFile == ""):
		return errors.New("--tls-cert and --tls-key: give both (--tls-client-ca adds mutual TLS to them)")
	}
	_, err := parseCipher(s.EncryptionCipher)
	return err
}

func parseCipher(s string) (server.StoreCipher, error) {
	switch s {
	case "chacha":
		return server.ChaCha, nil
	case "aes":
		return server.AES, nil
	}
	return 0, fmt.Errorf("--encryption-cipher: %q is not chacha or aes", s)
}

// load reads the key files named by the flags into c: the store key and the namespace keys.
func (s *securityConfig) load(c *config) error {
	if s.EncryptionKeyFile != "" {
		key, err := embedded.ReadEncryptionKeyFile(s.EncryptionKeyFile)
		if err != nil {
			return err
		}
		cipher, _ := parseCipher(s.EncryptionCipher)
		s.encryption = embedded.StoreEncryption{Key: key, Cipher: cipher}
	}
	if s.NamespaceKeysFile != "" {
		keys, err := sealing.ReadKeysFile(s.NamespaceKeysFile)
		if err != nil {
			return err
		}
		c.Daemon.NamespaceKeys = keys
	}
	return nil
}

// natsOptions are the TLS options of the connection to --nats-url.
func (s *securityConfig) natsOptions() []nats.Option {
	var opts []nats.Option
	if s.NATSTLSCA != "" {
		opts = append(opts, nats.RootCAs(s.NATSTLSCA))
	}
	if s.NATSTLSCert != "" {
		opts = append(opts, nats.ClientCert(s.NATSTLSCert, s.NATSTLSKey))
	}
	return opts
}

// logState says what is protected and how, naming files and key counts, never a key.
func (s *securityConfig) logState(log *slog.Logger, c config) {
	if c.NATSURL == "" {
		if s.ServerTLS.Enabled() {
			log.Info("embedded NATS server: TLS on the client port", "cert", s.ServerTLS.CertFile, "mutual_tls", s.ServerTLS.ClientCAFile != "")
		} else {
			log.Info("embedded NATS server: no TLS on the client port (--tls-cert, --tls-key)")
		}
		if s.encryption.Key != "" {
			log.Info("embedded NATS server: JetStream store encrypted", "key_file", s.EncryptionKeyFile, "cipher", s.EncryptionCipher)
		} else {
			log.Info("embedded NATS server: JetStream store not encrypted (--encryption-key-file)")
		}
	} else if s.NATSTLSCA != "" || s.NATSTLSCert != "" {
		log.Info("NATS connection: TLS", "ca", s.NATSTLSCA, "client_cert", s.NATSTLSCert)
	}
	if n := c.Daemon.NamespaceKeys.Count(); n > 0 {
		log.Info("stored conversations encrypted per namespace", "key_file", s.NamespaceKeysFile, "keys", n)
	}
}
