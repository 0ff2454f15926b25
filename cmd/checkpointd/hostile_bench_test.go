package main

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/transfer/embedded"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// BenchmarkHostile_Flood publishes, raw and at once, 64 saves with forged chunk counts and 8 zstd
// bombs (about 10 KiB each, 300 MiB of zeros: past the default --max-checkpoint-bytes) to a
// checkpointd process, against a NATS server run by the benchmark (the daemon alone), and reports
// the process's peak RSS: with the default limits, and with --ingest-memory lowered to 64 MiB.
// Every save must get a typed refusal. Linux only (/proc).
func BenchmarkHostile_Flood(b *testing.B) {
	bin := filepath.Join(b.TempDir(), "checkpointd")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(b, err, "%s", out)
	bomb := testenv.Bomb(b, 300<<20)
	b.Run("default", func(b *testing.B) { runFlood(b, bin, bomb) })
	b.Run("ingest-memory=64MiB", func(b *testing.B) { runFlood(b, bin, bomb, "--ingest-memory", "67108864") })
}

func runFlood(b *testing.B, bin string, bomb []byte, args ...string) {
	ns, err := embedded.StartServer(embedded.ServerConfig{DataDir: b.TempDir(), Listen: "127.0.0.1:0"})
	require.NoError(b, err)
	defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
	httpAddr := freeAddrB(b)
	cmd := exec.Command(bin, append(args, "--nats-url", ns.ClientURL(), "--http-listen", httpAddr, "--log-level", "warn")...)
	cmd.Stderr = os.Stderr
	require.NoError(b, cmd.Start())
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	require.Eventually(b, func() bool {
		resp, err := http.Get("http://" + httpAddr + "/healthz")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == 200
	}, 20*time.Second, 50*time.Millisecond)
	idle := peakRSS(b, cmd.Process.Pid)
	nc, err := nats.Connect(ns.ClientURL())
	require.NoError(b, err)
	defer nc.Close()

	codes := map[string]int{}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		results := testenv.HostileSaves(b, nc, fmt.Sprint("hostile-", i), 64, 8, bomb)
		for _, r := range results {
			if r.OK || r.Error == nil {
				b.Fatalf("hostile save %s accepted", r.SaveID)
			}
			codes[r.Error.Code]++
		}
	}
	b.StopTimer()
	peak := peakRSS(b, cmd.Process.Pid)
	b.Logf("refusals: %v", codes)
	for code := range codes {
		require.Contains(b, []string{wire.CodeBadRequest, wire.CodeTooLarge, wire.CodeBusy}, code)
	}
	b.ReportMetric(float64(idle)/(1<<20), "idle_rss_MiB")
	b.ReportMetric(float64(peak)/(1<<20), "peak_rss_MiB")
}
