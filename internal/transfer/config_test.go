package transfer_test

import (
	"log/slog"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/metrics"
	"github.com/checkpointd/checkpointd/internal/transfer"
)

// The daemon refuses an engine configuration the engine cannot run with (a zstd window no read
// could decode), at start-up, naming it, rather than acknowledging saves it cannot read back.
func TestConfig_EngineSettingsAreChecked(t *testing.T) {
	cfg := transfer.DefaultConfig()
	cfg.Logger, cfg.Metrics = slog.Default(), metrics.New(prometheus.NewRegistry())
	require.NoError(t, cfg.Validate())
	cfg.Engine.Window = 16 << 20
	err := cfg.Validate()
	require.ErrorIs(t, err, engine.ErrConfig)
	require.ErrorContains(t, err, "Window")
}
