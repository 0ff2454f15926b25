package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/transfer/embedded"
)

// Logging in to a deployment with tenants: a user and password in the URL, an nkey seed file with
// --nkey; an operator moves every namespace to another deployment with migrate -A; no password
// ever shows in what checkpointctl prints.
func TestCheckpointctl_Logins(t *testing.T) {
	kp, err := nkeys.CreateUser()
	require.NoError(t, err)
	pub, _ := kp.PublicKey()
	seed, _ := kp.Seed()
	seedFile := filepath.Join(t.TempDir(), "bob.nk")
	require.NoError(t, os.WriteFile(seedFile, seed, 0o600))
	tenants := &embedded.Tenants{
		Admins: []embedded.Login{{User: "ops", Password: "ops-pw-31337"}},
		Tenants: []embedded.Tenant{{Namespace: "alice", Login: embedded.Login{User: "alice", Password: "alice-pw-31337"}},
			{Namespace: "bob", Login: embedded.Login{Nkey: pub}}},
	}
	src, dst := testenv.StartTenancy(t, tenants, 0), testenv.StartTenancy(t, tenants, 0)
	at := func(e *testenv.Tenancy, login string) string {
		return "--server=nats://" + login + "@" + strings.TrimPrefix(e.URL(), "nats://")
	}
	anon := "--server=" + src.URL()

	_, stderr, code := ctl(t, "", at(src, "alice:alice-pw-31337"), "put", "-n", "alice", "demo", corpusFile)
	require.Equal(t, 0, code, stderr)
	_, stderr, code = ctl(t, "", anon, "--nkey", seedFile, "put", "-n", "bob", "demo", corpusFile)
	require.Equal(t, 0, code, stderr)
	_, stderr, code = ctl(t, "", anon, "--nkey", seedFile, "restore", "-n", "alice", "demo")
	require.Equal(t, exitUnavailable, code, "bob reaches only bob: %s", stderr)
	_, stderr, code = ctl(t, "", anon, "list", "-n", "alice")
	require.Equal(t, exitUnavailable, code, stderr)
	require.Contains(t, stderr, "Authorization Violation")

	out, stderr, code := ctl(t, "", at(src, "ops:ops-pw-31337"), "migrate", "-A", "--to", "nats://ops:ops-pw-31337@"+dst.Cfg.Listen)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "migrated 2 session(s) to nats://"+dst.Cfg.Listen)
	out, stderr, code = ctl(t, "", at(dst, "ops:ops-pw-31337"), "list", "-A")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "alice")
	require.Contains(t, out, "bob")
	out, stderr, code = ctl(t, "", at(src, "alice:alice-pw-31337"), "list", "-n", "alice", "-o", "json")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, `"to": "nats://`+dst.Cfg.Listen+`"`, "the source says where it went")
	require.NotContains(t, out+stderr, "pw-31337")

	_, stderr, code = ctl(t, "", anon, "--nkey", filepath.Join(t.TempDir(), "missing.nk"), "list")
	require.Equal(t, exitUsage, code, stderr)
	require.Contains(t, stderr, "--nkey")
	_, stderr, code = ctl(t, "", "--server=nats://alice:alice-pw-31337@127.0.0.1:1", "--timeout=1s", "list")
	require.Equal(t, exitUnavailable, code, stderr)
	require.Contains(t, stderr, "nats://127.0.0.1:1")
	require.NotContains(t, stderr, "pw-31337", "a password in the URL is never printed")
}
