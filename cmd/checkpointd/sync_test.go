package main

import (
	"context"
	"io"
	"testing"

	"github.com/checkpointd/checkpointd/internal/transfer/embedded"
	"github.com/stretchr/testify/require"
)

// --sync always (or CHECKPOINTD_SYNC=always) must reach the embedded server's JetStream, where it
// is the server's own sync_always setting; the default leaves it off.
func TestRun_SyncAlwaysReachesTheEmbeddedServer(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		env  string
		want bool
	}{
		{"default", nil, "", false},
		{"flag", []string{"--sync", "always"}, "", true},
		{"environment", nil, "always", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env != "" {
				t.Setenv("CHECKPOINTD_SYNC", tc.env)
			}
			args := append([]string{"--data-dir", t.TempDir(), "--nats-listen", "127.0.0.1:0"}, tc.args...)
			cfg, err := parseConfig(args, io.Discard)
			require.NoError(t, err)
			ns, err := embedded.StartServer(cfg.embeddedServer())
			require.NoError(t, err)
			defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
			require.Equal(t, tc.want, ns.JetStreamConfig().SyncAlways)
		})
	}
}

func TestRun_SyncFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--sync", "sometimes"}, `--sync: "sometimes" is not default or always`},
		{[]string{"--sync", "always", "--nats-url", "nats://127.0.0.1:1"}, "sync_interval: always"},
	} {
		err := run(context.Background(), tc.args, io.Discard)
		var ue usageError
		require.ErrorAs(t, err, &ue, "%v", tc.args)
		require.ErrorContains(t, err, tc.want)
	}
}
