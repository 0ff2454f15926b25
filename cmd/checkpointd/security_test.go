package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/transfer/embedded"
)

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
	return path
}

func randomKey() string {
	k := make([]byte, 32)
	_, _ = rand.Read(k)
	return base64.StdEncoding.EncodeToString(k)
}

// startRun runs checkpointd in-process with args until the test ends; it returns once the daemon
// is ready, and the logs.
func startRun(t *testing.T, args ...string) *syncBuffer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	logs := &syncBuffer{}
	done := make(chan error, 1)
	go func() { done <- run(ctx, args, logs) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("run did not return")
		}
	})
	require.Eventually(t, func() bool {
		select {
		case err := <-done:
			t.Fatalf("checkpointd stopped: %v\n%s", err, logs)
		default:
		}
		return strings.Contains(logs.String(), "checkpointd ready")
	}, 30*time.Second, 20*time.Millisecond)
	return logs
}

// checkpointd with TLS, mutual TLS, an encrypted store and namespace keys, at debug level: a
// client with the right certificates saves and restores, and no key appears in the logs.
func TestRun_TLSAndEncryptionAtRestNeverLogAKey(t *testing.T) {
	pki := testenv.NewPKI(t)
	storeKey := "store key " + randomKey()
	nsKey, oldKey := randomKey(), randomKey()
	keyFile := writeFile(t, "store.key", storeKey+"\n")
	nsFile := writeFile(t, "ns.json", `{"alice": ["`+nsKey+`", "`+oldKey+`"]}`)
	addr := freeAddr(t)
	logs := startRun(t, "--data-dir", t.TempDir(), "--nats-listen", addr, "--http-listen", "", "--log-level", "debug",
		"--tls-cert", pki.ServerCert, "--tls-key", pki.ServerKey, "--tls-client-ca", pki.CA,
		"--encryption-key-file", keyFile, "--namespace-keys", nsFile)

	c, err := checkpoint.Connect("nats://"+addr, []nats.Option{nats.RootCAs(pki.CA), nats.ClientCert(pki.ClientCert, pki.ClientKey)})
	require.NoError(t, err)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conv := []byte(`[{"role":"user","content":"encrypted twice"}]`)
	key := checkpoint.Key{Namespace: "alice", Session: "s"}
	_, err = c.Save(ctx, key, conv)
	require.NoError(t, err)
	got, _, err := c.Restore(ctx, key, 0)
	require.NoError(t, err)
	require.Equal(t, string(conv), string(got))

	out := logs.String()
	require.Contains(t, out, "JetStream store encrypted")
	require.Contains(t, out, "mutual_tls=true")
	require.Contains(t, out, "stored conversations encrypted per namespace")
	for _, secret := range []string{storeKey, strings.TrimPrefix(storeKey, "store key "), nsKey, oldKey} {
		require.NotContains(t, out, secret, "a key is in the logs")
	}
}

// Each refused combination is a clear error naming the flag, and never shows a key.
func TestRun_SecurityFlagErrors(t *testing.T) {
	pki := testenv.NewPKI(t)
	secret := randomKey()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--tls-cert", pki.ServerCert}, "--tls-cert and --tls-key"},
		{[]string{"--nats-url", "nats://127.0.0.1:1", "--tls-cert", pki.ServerCert, "--tls-key", pki.ServerKey}, "with --nats-url use --nats-tls-ca"},
		{[]string{"--nats-tls-ca", pki.CA}, "only meaningful with --nats-url"},
		{[]string{"--nats-url", "nats://127.0.0.1:1", "--nats-tls-cert", pki.ClientCert}, "--nats-tls-cert and --nats-tls-key"},
		{[]string{"--nats-url", "nats://127.0.0.1:1", "--encryption-key-file", "k"}, "--encryption-key-file"},
		{[]string{"--encryption-cipher", "rot13"}, "--encryption-cipher"},
		{[]string{"--encryption-key-file", writeFile(t, "short", "tiny")}, "at least 16 are needed"},
		{[]string{"--encryption-key-file", "/nonexistent/key"}, "/nonexistent/key"},
		{[]string{"--namespace-keys", writeFile(t, "bad.json", `{"alice": "`+secret[:20]+`"}`)}, `namespace "alice"`},
	} {
		err := run(context.Background(), append([]string{"--data-dir", t.TempDir(), "--http-listen", ""}, tc.args...), &syncBuffer{})
		require.ErrorContains(t, err, tc.want, "%v", tc.args)
		require.NotContains(t, err.Error(), secret[:20])
	}
}

// A start with the wrong store key fails with the typed error, after the right one saved.
func TestRun_WrongStoreKeyFails(t *testing.T) {
	dir := t.TempDir()
	right, wrong := writeFile(t, "right", "the right store key"), writeFile(t, "wrong", "the wrong store key")
	func() {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		logs := &syncBuffer{}
		go func() {
			done <- run(ctx, []string{"--data-dir", dir, "--nats-listen", "127.0.0.1:0", "--http-listen", "", "--encryption-key-file", right}, logs)
		}()
		require.Eventually(t, func() bool { return strings.Contains(logs.String(), "checkpointd ready") }, 30*time.Second, 20*time.Millisecond)
		cancel()
		require.NoError(t, <-done)
	}()
	for _, args := range [][]string{{"--encryption-key-file", wrong}, {}} {
		logs := &syncBuffer{}
		err := run(context.Background(), append([]string{"--data-dir", dir, "--nats-listen", "127.0.0.1:0", "--http-listen", ""}, args...), logs)
		require.Error(t, err, "%v", args)
		require.True(t, errors.Is(err, embedded.ErrWrongStoreKey) || errors.Is(err, embedded.ErrStoreEncrypted), "%v: %v", args, err)
		require.NotContains(t, err.Error()+logs.String(), "store key")
	}
}

// Against --nats-url, checkpointd uses the TLS it is given: a server that requires mutual TLS is
// reached with --nats-tls-ca, --nats-tls-cert and --nats-tls-key, and refused without the client
// certificate.
func TestRun_NATSURLWithMutualTLS(t *testing.T) {
	pki := testenv.NewPKI(t)
	s, err := embedded.StartServer(embedded.ServerConfig{DataDir: t.TempDir(), Listen: "127.0.0.1:0",
		TLS: embedded.ServerTLS{CertFile: pki.ServerCert, KeyFile: pki.ServerKey, ClientCAFile: pki.CA}})
	require.NoError(t, err)
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	url := "nats://" + s.Addr().String()

	err = run(context.Background(), []string{"--nats-url", url, "--http-listen", "", "--nats-tls-ca", pki.CA}, &syncBuffer{})
	require.ErrorContains(t, err, "connecting to NATS", "no client certificate")

	startRun(t, "--nats-url", url, "--http-listen", "", "--nats-tls-ca", pki.CA, "--nats-tls-cert", pki.ClientCert, "--nats-tls-key", pki.ClientKey)
	c, err := checkpoint.Connect(url, []nats.Option{nats.RootCAs(pki.CA), nats.ClientCert(pki.ClientCert, pki.ClientKey)})
	require.NoError(t, err)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err = c.Save(ctx, checkpoint.Key{Session: "external"}, []byte(`[{"role":"user","content":"hi"}]`))
	require.NoError(t, err)
}
