package metrics

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

func TestHandler_HealthFollowsReadiness(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg)
	var mu sync.Mutex
	problem := errors.New("not started\ningest consumer deleted")
	health := func() error { mu.Lock(); defer mu.Unlock(); return problem }
	srv := httptest.NewServer(Handler(reg, health, health))
	defer srv.Close()

	get := func(path string) (int, string) {
		resp, err := http.Get(srv.URL + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}
	code, body := get("/healthz")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, "unhealthy: not started\nunhealthy: ingest consumer deleted\n", body, "the body says why")
	mu.Lock()
	problem = nil
	mu.Unlock()
	code, body = get("/healthz")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "ok\n", body)

	m.Saves.WithLabelValues(SavePathRequest, "ok").Add(3)
	m.Saves.WithLabelValues(SavePathRequest, "invalid").Inc()
	require.Equal(t, 3.0, testutil.ToFloat64(m.Saves.WithLabelValues(SavePathRequest, "ok")))
	require.Equal(t, 1.0, testutil.ToFloat64(m.Saves.WithLabelValues(SavePathRequest, "invalid")))
	_, body = get("/metrics")
	for _, name := range []string{"checkpointd_saves_total", "checkpointd_compacted_bytes_total", "checkpointd_nats_events_total{event=\"disconnect\"} 0", "go_goroutines", "process_resident_memory_bytes"} {
		require.Contains(t, body, name)
	}
	code, _ = get("/nope")
	require.Equal(t, http.StatusNotFound, code)
}
