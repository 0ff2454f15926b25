package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/procfs"
)

// Helpers of the harnesses that run checkpointd as a real OS process (crash_test.go, load_test.go).

// checkpointdBinary builds this package into a temporary directory of tb and returns the path of
// the executable (go build's cache makes a second build cheap).
func checkpointdBinary(tb testing.TB) string {
	tb.Helper()
	bin := filepath.Join(tb.TempDir(), "checkpointd")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(tb, err, "go build: %s", out)
	return bin
}

// daemonProc is one checkpointd process on a data directory and fixed ports, started again on the
// same ones after each kill, as a supervisor would.
type daemonProc struct {
	tb       testing.TB
	bin      string
	dataDir  string
	natsAddr string
	httpAddr string
	extra    []string

	cmd     *exec.Cmd
	exited  chan struct{}
	logs    *bytes.Buffer // stderr of the current incarnation
	starts  int
	allLogs bytes.Buffer // the last lines of every earlier incarnation, for a failure's report
}

func newDaemonProc(tb testing.TB, extra ...string) *daemonProc {
	return &daemonProc{tb: tb, bin: checkpointdBinary(tb), dataDir: tb.TempDir(),
		natsAddr: freeAddrTB(tb), httpAddr: freeAddrTB(tb), extra: extra}
}

func (p *daemonProc) url() string { return "nats://" + p.natsAddr }

// start runs the process and waits until /healthz answers 200.
func (p *daemonProc) start() {
	p.tb.Helper()
	args := append([]string{"--data-dir", p.dataDir, "--nats-listen", p.natsAddr, "--http-listen", p.httpAddr,
		"--log-level", "info"}, p.extra...)
	p.cmd = exec.Command(p.bin, args...)
	p.logs = &bytes.Buffer{}
	p.cmd.Stderr = &lockedWriter{w: p.logs}
	require.NoError(p.tb, p.cmd.Start())
	p.starts++
	p.exited = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { _ = cmd.Wait(); close(done) }(p.cmd, p.exited)
	p.tb.Cleanup(p.kill)
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-p.exited:
			p.tb.Fatalf("checkpointd exited during start %d: %v\n%s", p.starts, p.cmd.ProcessState, p.logTail())
		default:
		}
		if healthy(p.httpAddr) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.tb.Fatalf("checkpointd start %d: /healthz never answered 200\n%s", p.starts, p.logTail())
}

// kill SIGKILLs the process (no shutdown of any kind) and waits until it is gone.
func (p *daemonProc) kill() {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
	p.allLogs.WriteString(fmt.Sprintf("--- incarnation %d ---\n%s", p.starts, tail(p.logs.String(), 40)))
	p.cmd = nil
}

func (p *daemonProc) pid() int { return p.cmd.Process.Pid }

func (p *daemonProc) logTail() string {
	return p.allLogs.String() + fmt.Sprintf("--- incarnation %d (current) ---\n%s", p.starts, tail(p.logs.String(), 40))
}

// metric reads one sample of the daemon's /metrics (0 when absent).
func (p *daemonProc) metric(name string) float64 {
	resp, err := http.Get("http://" + p.httpAddr + "/metrics")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(resp.Body)
	for _, line := range strings.Split(buf.String(), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return 0
}

func healthy(addr string) bool {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get("http://" + addr + "/healthz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func freeAddrTB(tb testing.TB) string {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(tb, err)
	defer l.Close()
	return l.Addr().String()
}

func tail(s string, lines int) string {
	parts := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(parts) > lines {
		parts = parts[len(parts)-lines:]
	}
	return strings.Join(parts, "\n") + "\n"
}

// lockedWriter lets the process write its stderr while the test reads it.
type lockedWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// peakRSSOf reads a process's peak resident set size (VmHWM) in bytes, 0 if unreadable.
func peakRSSOf(pid int) int64 {
	n, _ := procfs.PeakRSS(pid)
	return n
}

// corpusMessages returns the messages of every transcript of testdata/corpus, compacted (the
// canonical form the daemon stores and hashes), one slice per transcript in file name order.
func corpusMessages(tb testing.TB) [][]json.RawMessage {
	tb.Helper()
	files, err := filepath.Glob("../../testdata/corpus/*.json")
	require.NoError(tb, err)
	require.NotEmpty(tb, files)
	var out [][]json.RawMessage
	for _, f := range files {
		data, err := os.ReadFile(f)
		require.NoError(tb, err)
		var msgs []json.RawMessage
		require.NoError(tb, json.Unmarshal(data, &msgs), f)
		for i, m := range msgs {
			var c bytes.Buffer
			require.NoError(tb, json.Compact(&c, m))
			msgs[i] = c.Bytes()
		}
		out = append(out, msgs)
	}
	return out
}

// joinMessages is the compact JSON array of msgs.
func joinMessages(msgs []json.RawMessage) []byte {
	n := 2
	for _, m := range msgs {
		n += len(m) + 1
	}
	out := make([]byte, 0, n)
	out = append(out, '[')
	for i, m := range msgs {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, m...)
	}
	return append(out, ']')
}
