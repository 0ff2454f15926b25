package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/transfer/embedded"
)

// du's numbers are the sums of the sessions' histories: versions kept, the head's raw size, and
// the stored bytes of the kept versions, per session and per namespace; a prune lowers them.
func TestCheckpointctl_Du(t *testing.T) {
	env := testenv.Start(t)
	c, err := checkpoint.Connect(env.URL(), nil)
	require.NoError(t, err)
	defer c.Close()
	ctx := context.Background()
	corpus := func(name string) []byte {
		data, err := os.ReadFile(filepath.Join("../../testdata/corpus", name))
		require.NoError(t, err)
		return data
	}
	// In du's order: by namespace, session, agent.
	keys := []checkpoint.Key{{Session: "a", Agent: "helper"}, {Session: "a"}, {Session: "b"}, {Namespace: "team", Session: "c"}}
	files := [][]string{
		{"swe_agent_marshmallow_fc.json"},
		{"openhands_gui_todo_app.json", "pi_before_compaction.json", "openhands_gui_todo_app.json"},
		{"codex_rollout_codemie.json", "gemini_cli_codemie_session.json"},
		{"pi_before_compaction.json"},
	}
	for i, k := range keys {
		for _, f := range files[i] {
			_, err := c.Save(ctx, k, corpus(f))
			require.NoError(t, err, f)
		}
	}

	want := func(namespace string) nsUsage {
		ns := nsUsage{Namespace: namespace}
		for _, k := range keys {
			if k.WithDefaults().Namespace != namespace {
				continue
			}
			hist, err := c.History(ctx, k)
			require.NoError(t, err)
			u := checkpoint.SessionUsage{Key: k.WithDefaults(), Versions: len(hist), Head: hist[len(hist)-1].Version,
				RawBytes: hist[len(hist)-1].RawBytes}
			for _, v := range hist {
				u.StoredBytes += v.StoredBytes
			}
			require.Positive(t, u.StoredBytes)
			ns.Sessions = append(ns.Sessions, u)
			ns.Versions += u.Versions
			ns.RawBytes += u.RawBytes
			ns.StoredBytes += u.StoredBytes
		}
		return ns
	}
	du := func(args ...string) []nsUsage {
		t.Helper()
		out, stderr, code := ctl(t, "", append([]string{"--server=" + env.URL(), "du", "-o", "json"}, args...)...)
		require.Equal(t, 0, code, stderr)
		var got []nsUsage
		require.NoError(t, json.Unmarshal([]byte(out), &got), out)
		return got
	}
	require.Equal(t, []nsUsage{want("default")}, du())
	require.Equal(t, []nsUsage{want("team")}, du("-n", "team"))
	all := du("-A")
	require.Equal(t, []nsUsage{want("default"), want("team")}, all)
	require.Equal(t, 6, all[0].Versions)

	_, err = c.Prune(ctx, "default", checkpoint.PruneOptions{Session: "a", KeepLast: 1})
	require.NoError(t, err)
	after := du()
	require.Equal(t, []nsUsage{want("default")}, after)
	require.Equal(t, 1, after[0].Sessions[1].Versions)
	require.Less(t, after[0].StoredBytes, all[0].StoredBytes)

	out, stderr, code := ctl(t, "", "--server="+env.URL(), "du", "-A")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "STORED")
	require.Regexp(t, `team\s+\(total: 1 session\)\s+1\s`, out)
	require.Equal(t, 1+4+2, strings.Count(out, "\n"), out) // header, 4 sessions, 2 totals

	out, _, code = ctl(t, "", "--server="+env.URL(), "du", "-n", "nobody", "-o", "json")
	require.Equal(t, 0, code)
	require.JSONEq(t, "[]", out)
}

// With --tenants, an operator's login measures every namespace with -A, and a tenant's login its own
// namespace only: -A, or another namespace, is refused as unavailable (its login has no route there).
func TestCheckpointctl_DuTenants(t *testing.T) {
	tenants := &embedded.Tenants{
		Admins: []embedded.Login{{User: "ops", Password: "ops-pw"}},
		Tenants: []embedded.Tenant{
			{Namespace: "alice", Login: embedded.Login{User: "alice", Password: "alice-pw"}},
			{Namespace: "bob", Login: embedded.Login{User: "bob", Password: "bob-pw"}}}}
	env := testenv.StartTenancy(t, tenants, 0)
	login := func(user string) string { return "nats://" + user + "@" + strings.TrimPrefix(env.URL(), "nats://") }
	conv := []byte(`[{"role":"user","content":"hi"}]`)
	for _, who := range []string{"alice", "bob"} {
		c := env.Client(nats.UserInfo(who, who+"-pw"))
		for _, s := range []string{"s1", "s2"} {
			_, err := c.Save(context.Background(), checkpoint.Key{Namespace: who, Session: s}, conv)
			require.NoError(t, err)
		}
		c.Close()
	}
	du := func(user string, args ...string) ([]nsUsage, string, int) {
		t.Helper()
		out, stderr, code := ctl(t, "", append([]string{"--server=" + login(user), "du", "-o", "json"}, args...)...)
		var got []nsUsage
		if code == 0 {
			require.NoError(t, json.Unmarshal([]byte(out), &got), out)
		}
		return got, stderr, code
	}

	all, stderr, code := du("ops:ops-pw", "-A")
	require.Equal(t, 0, code, stderr)
	require.Len(t, all, 2)
	for i, ns := range []string{"alice", "bob"} {
		require.Equal(t, ns, all[i].Namespace)
		require.Len(t, all[i].Sessions, 2)
		require.Equal(t, 2, all[i].Versions)
		require.Positive(t, all[i].StoredBytes)
	}

	own, stderr, code := du("alice:alice-pw", "-n", "alice")
	require.Equal(t, 0, code, stderr)
	require.Equal(t, all[:1], own, "a tenant sees its namespace as the operator does")

	_, stderr, code = du("alice:alice-pw", "-A")
	require.Equal(t, exitUnavailable, code, "a tenant cannot measure every namespace: %s", stderr)
	require.Contains(t, stderr, "a login reaches only its own namespace")
	_, stderr, code = du("alice:alice-pw", "-n", "bob")
	require.Equal(t, exitUnavailable, code, "nor another tenant's: %s", stderr)
	require.Contains(t, stderr, "cp.api.bob.list")
}
