package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/procfs"
	"github.com/checkpointd/checkpointd/internal/transfer/embedded"
)

// peakRSS reads a process's peak resident set size (VmHWM) in bytes.
func peakRSS(b *testing.B, pid int) int64 {
	n, err := procfs.PeakRSS(pid)
	require.NoError(b, err)
	return n
}

// BenchmarkLarge_64MiB saves and restores a 64 MiB conversation (64 tool results, each an inline
// 1 MiB base64 image) through a checkpointd process and reports the process's peak RSS against the
// conversation's size: with its embedded NATS server in the same process (the default), and as the
// daemon alone against a NATS server run by the benchmark (--nats-url, as in production). Linux
// only (/proc).
func BenchmarkLarge_64MiB(b *testing.B) {
	bin := filepath.Join(b.TempDir(), "checkpointd")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(b, err, "%s", out)
	conv := largeConversation()
	b.Run("embedded", func(b *testing.B) {
		natsAddr := freeAddrB(b)
		runLarge(b, bin, "nats://"+natsAddr, conv, "--data-dir", b.TempDir(), "--nats-listen", natsAddr)
	})
	b.Run("external-nats", func(b *testing.B) {
		ns, err := embedded.StartServer(embedded.ServerConfig{DataDir: b.TempDir(), Listen: "127.0.0.1:0"})
		require.NoError(b, err)
		defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
		runLarge(b, bin, ns.ClientURL(), conv, "--nats-url", ns.ClientURL())
	})
}

func largeConversation() []byte {
	var conv bytes.Buffer
	conv.WriteString(`[{"role":"user","content":"describe these screenshots"}`)
	img := make([]byte, 768<<10)
	for i := 0; i < 64; i++ {
		_, _ = rand.Read(img)
		fmt.Fprintf(&conv, `,{"role":"assistant","content":[{"type":"toolCall","id":"c%d","name":"screenshot","arguments":{}}]}`, i)
		fmt.Fprintf(&conv, `,{"role":"toolResult","toolCallId":"c%d","content":[{"type":"image","data":"%s","mimeType":"image/png"}]}`, i, base64.StdEncoding.EncodeToString(img))
	}
	conv.WriteString(`]`)
	return conv.Bytes()
}

// runLarge starts the checkpointd binary with args, saves and restores conv b.N times through url,
// and reports the process's peak RSS.
func runLarge(b *testing.B, bin, url string, conv []byte, args ...string) {
	httpAddr := freeAddrB(b)
	cmd := exec.Command(bin, append(args, "--http-listen", httpAddr, "--log-level", "warn")...)
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
	size := int64(len(conv))
	baseline := peakRSS(b, cmd.Process.Pid)

	c, err := checkpoint.Connect(url, nil, checkpoint.WithTimeout(2*time.Minute))
	require.NoError(b, err)
	defer c.Close()
	ctx := context.Background()
	b.SetBytes(size)
	b.ResetTimer()
	var savePeak int64
	for i := 0; i < b.N; i++ {
		key := checkpoint.Key{Session: fmt.Sprint("large-", i)}
		if _, err := c.Save(ctx, key, conv); err != nil {
			b.Fatal(err)
		}
		savePeak = max(savePeak, peakRSS(b, cmd.Process.Pid))
		got, _, err := c.Restore(ctx, key, 0)
		if err != nil || int64(len(got)) != size {
			b.Fatal(err, len(got))
		}
	}
	b.StopTimer()
	peak := peakRSS(b, cmd.Process.Pid)

	// A rewrite (the last image's type corrected): the daemon compares it with the head message by
	// message, images by their hashes.
	last := bytes.LastIndex(conv, []byte(`"image/png"`))
	rewritten := slices.Concat(conv[:last], []byte(`"image/webp"`), conv[last+len(`"image/png"`):])
	v, err := c.Save(ctx, checkpoint.Key{Session: "large-0"}, rewritten)
	require.NoError(b, err)
	require.Less(b, v.StoredBytes, int64(1<<20), "the rewrite keeps every image by reference")
	rewritePeak := peakRSS(b, cmd.Process.Pid)
	b.ReportMetric(float64(size)/(1<<20), "conv_MiB")
	b.ReportMetric(float64(baseline)/(1<<20), "idle_rss_MiB")
	b.ReportMetric(float64(peak)/(1<<20), "peak_rss_MiB")
	b.ReportMetric(float64(savePeak)/(1<<20), "peak_rss_after_save_MiB")
	b.ReportMetric(float64(peak)/float64(size), "peak_rss_x_size")
	b.ReportMetric(float64(rewritePeak)/(1<<20), "peak_rss_after_rewrite_MiB")
}

func freeAddrB(b *testing.B) string {
	b.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(b, err)
	defer l.Close()
	return l.Addr().String()
}
