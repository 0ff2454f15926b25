package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/transfer/embedded"
)

// scrape is one /metrics page: the type of each family and the value of each sample line
// (name{labels} as written).
type scrape struct {
	types   map[string]string
	helps   map[string]string
	samples map[string]float64
	text    string
}

func getMetrics(t *testing.T, httpAddr string) scrape {
	t.Helper()
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get("http://" + httpAddr + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	s := scrape{types: map[string]string{}, helps: map[string]string{}, samples: map[string]float64{}, text: string(body)}
	sc := bufio.NewScanner(strings.NewReader(s.text))
	for sc.Scan() {
		line := sc.Text()
		if f := strings.Fields(line); len(f) >= 4 && f[0] == "#" && f[1] == "TYPE" {
			s.types[f[2]] = f[3]
		} else if len(f) >= 3 && f[0] == "#" && f[1] == "HELP" {
			s.helps[f[2]] = strings.Join(f[3:], " ")
		} else if line != "" && !strings.HasPrefix(line, "#") {
			i := strings.LastIndexByte(line, ' ')
			v, err := strconv.ParseFloat(line[i+1:], 64)
			require.NoError(t, err, line)
			s.samples[line[:i]] = v
		}
	}
	return s
}

// TestMetrics_AnswerOperatorsQuestions runs checkpointd as a process, saves and restores, and
// checks that /metrics answers what an operator asks (how far behind, how much stored and where,
// what was refused), that every family follows Prometheus naming (promtool check metrics, where
// installed, and the rules below), that /readyz and /healthz answer, and that the Grafana dashboard
// names only metrics the daemon exports, in PromQL promtool accepts.
func TestMetrics_AnswerOperatorsQuestions(t *testing.T) {
	p := newDaemonProc(t)
	p.start()
	cl, err := checkpoint.Connect(p.url(), nil)
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	key := checkpoint.Key{Namespace: "default", Session: "ops", Agent: "main"}
	conv := joinMessages(corpusMessages(t)[0])
	_, err = cl.Save(ctx, key, conv)
	require.NoError(t, err)
	for range 2 {
		got, _, err := cl.Restore(ctx, key, 0)
		require.NoError(t, err)
		require.Equal(t, len(conv), len(got))
	}
	_, err = cl.Save(ctx, checkpoint.Key{Namespace: "default", Session: "bad", Agent: "main"}, []byte(`{"not": "a conversation"}`))
	require.Error(t, err)

	var m scrape
	require.Eventually(t, func() bool {
		m = getMetrics(t, p.httpAddr)
		return m.samples[`checkpointd_stream_messages{stream="CP_LOG"}`] > 0 && m.samples[`checkpointd_saves_total{path="request",result="invalid"}`] == 1
	}, 10*time.Second, 100*time.Millisecond, "sessions and refusals never reported:\n%s", m.text)

	// What the operator asks, answered.
	for sample, check := range map[string]func(float64) bool{
		`checkpointd_saves_total{path="request",result="ok"}`:                  func(v float64) bool { return v == 1 },
		`checkpointd_saves_total{path="request",result="fenced"}`:              func(v float64) bool { return v == 0 }, // present before the first
		"checkpointd_ingest_queued_messages":                                   func(v float64) bool { return v == 0 },
		"checkpointd_ingest_oldest_queued_age_seconds":                         func(v float64) bool { return v == 0 },
		`checkpointd_ingest_consumer_pending_messages{state="undelivered"}`:    func(v float64) bool { return v == 0 },
		`checkpointd_ingest_consumer_pending_messages{state="unacknowledged"}`: func(v float64) bool { return v == 0 },
		"checkpointd_ingest_received_bytes_total":                              func(v float64) bool { return v > 0 },
		"checkpointd_saved_stored_bytes_total":                                 func(v float64) bool { return v > 0 },
		"checkpointd_process_written_bytes_total":                              func(v float64) bool { return v >= 0 },
		"checkpointd_data_dir_bytes":                                           func(v float64) bool { return v > 0 },
		`checkpointd_stream_bytes{stream="CP_LOG"}`:                            func(v float64) bool { return v > 0 },
		`checkpointd_stream_messages{stream="CP_LOG"}`:                         func(v float64) bool { return v >= 2 },
		`checkpointd_read_cache_lookups_total{result="hit"}`:                   func(v float64) bool { return v >= 1 },
		"checkpointd_read_cache_bytes":                                         func(v float64) bool { return v > 0 },
		`checkpointd_retention_rounds_total{result="error"}`:                   func(v float64) bool { return v == 0 },
		`checkpointd_nats_events_total{event="disconnect"}`:                    func(v float64) bool { return v == 0 },
		"checkpointd_state_age_seconds":                                        func(v float64) bool { return v < 10 },
		"checkpointd_save_duration_seconds_count":                              func(v float64) bool { return v == 2 },
	} {
		v, ok := m.samples[sample]
		require.True(t, ok, "%s missing from /metrics:\n%s", sample, m.text)
		require.True(t, check(v), "%s = %v", sample, v)
	}
	var buildInfo bool
	for s, v := range m.samples {
		buildInfo = buildInfo || strings.HasPrefix(s, "checkpointd_build_info{") && v == 1 && strings.Contains(s, `protocol="`)
	}
	require.True(t, buildInfo, "no checkpointd_build_info")

	requireNaming(t, m)
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get("http://" + p.httpAddr + path)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, path)
	}
	if promtool, err := exec.LookPath("promtool"); err == nil {
		cmd := exec.Command(promtool, "check", "metrics")
		cmd.Stdin = strings.NewReader(m.text)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "promtool check metrics: %s", out)
		require.Empty(t, strings.TrimSpace(string(out)), "promtool check metrics")
	} else {
		t.Log("promtool not installed: naming checked by this test's rules only")
	}
	requireDashboard(t, m)
	requireAlertRules(t, m)
}

// requireAlertRules checks deploy/prometheus/checkpointd-alerts.yml: every expression names only
// exported metrics, and promtool (where installed) accepts the file.
func requireAlertRules(t *testing.T, m scrape) {
	const path = "../../deploy/prometheus/checkpointd-alerts.yml"
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var exprs []string
	for _, line := range strings.Split(string(data), "\n") {
		if e, ok := strings.CutPrefix(strings.TrimSpace(line), "expr: "); ok {
			exprs = append(exprs, e)
		}
	}
	require.NotEmpty(t, exprs)
	requireExported(t, m, exprs, path)
	if promtool, err := exec.LookPath("promtool"); err == nil {
		out, err := exec.Command(promtool, "check", "rules", path).CombinedOutput()
		require.NoError(t, err, "promtool check rules: %s", out)
	}
}

// requireNaming checks Prometheus's naming rules on checkpointd's own families: snake case, a
// help text, counters (only they) end in _total, durations and ages in _seconds, sizes in _bytes.
func requireNaming(t *testing.T, m scrape) {
	snake := regexp.MustCompile(`^checkpointd_[a-z][a-z0-9_]*[a-z0-9]$`)
	n := 0
	for name, typ := range m.types {
		if !strings.HasPrefix(name, "checkpointd_") {
			continue
		}
		n++
		require.Regexp(t, snake, name)
		require.NotEmpty(t, m.helps[name], "%s has no help", name)
		require.Equal(t, typ == "counter", strings.HasSuffix(name, "_total"), "%s is a %s: _total is for counters, and counters only", name, typ)
		base := strings.TrimSuffix(name, "_total")
		if strings.Contains(base, "duration") || strings.Contains(base, "_age") || strings.Contains(base, "latency") {
			require.True(t, strings.HasSuffix(base, "_seconds"), "%s: a time is in seconds, named _seconds", name)
		}
		if strings.Contains(base, "bytes") {
			require.True(t, strings.HasSuffix(base, "_bytes"), "%s: a size is in bytes, named _bytes", name)
		}
		for _, bad := range []string{"_ms", "milli", "_kb", "_mb", "kibi", "mebi", "_count", "_sum", "_bucket"} {
			require.NotContains(t, base, bad, "%s: base units only, and no suffix Prometheus reserves", name)
		}
	}
	require.Greater(t, n, 20, "checkpointd's families")
}

// dashboardExprs returns every PromQL expression of the Grafana dashboard: panel targets and
// template variable queries.
func dashboardExprs(t *testing.T) []string {
	data, err := os.ReadFile("../../deploy/grafana/checkpointd.json")
	require.NoError(t, err)
	var d struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
		Templating struct {
			List []struct {
				Type  string
				Query json.RawMessage
			}
		}
	}
	require.NoError(t, json.Unmarshal(data, &d))
	var exprs []string
	require.NotEmpty(t, d.Panels)
	for _, p := range d.Panels {
		require.NotEmpty(t, p.Targets, "panel %q has no query", p.Title)
		for _, tg := range p.Targets {
			require.NotEmpty(t, tg.Expr, "panel %q", p.Title)
			exprs = append(exprs, tg.Expr)
		}
	}
	for _, v := range d.Templating.List {
		var q struct{ Query string }
		if v.Type == "query" && json.Unmarshal(v.Query, &q) == nil {
			if inner, ok := strings.CutPrefix(q.Query, "label_values("); ok {
				exprs = append(exprs, strings.SplitN(inner, ",", 2)[0])
			}
		}
	}
	return exprs
}

// requireExported checks that every metric the expressions name is one checkpointd exports.
func requireExported(t *testing.T, m scrape, exprs []string, where string) {
	metricName := regexp.MustCompile(`\b(?:checkpointd|process|go)_[a-z0-9_]+\b`)
	for _, e := range exprs {
		names := metricName.FindAllString(e, -1)
		require.NotEmpty(t, names, "%s: an expression naming no metric: %s", where, e)
		for _, name := range names {
			family := name
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if base, ok := strings.CutSuffix(name, suffix); ok && m.types[base] == "histogram" {
					family = base
				}
			}
			_, ok := m.types[family]
			require.True(t, ok, "%s uses %s, which checkpointd does not export (in %s)", where, name, e)
		}
	}
}

// requireDashboard checks that every metric the dashboard names is exported, and, with promtool,
// that every expression parses (Grafana's $__ intervals replaced by a duration).
func requireDashboard(t *testing.T, m scrape) {
	exprs := dashboardExprs(t)
	requireExported(t, m, exprs, "the dashboard")
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		return
	}
	var rules strings.Builder
	rules.WriteString("groups:\n- name: dashboard\n  rules:\n")
	grafanaVar := regexp.MustCompile(`\$__\w+|\$\{?\w+\}?`)
	for i, e := range exprs {
		e = grafanaVar.ReplaceAllStringFunc(e, func(v string) string {
			if strings.HasPrefix(v, "$__") {
				return "5m"
			}
			return ".*"
		})
		q, _ := json.Marshal(e)
		fmt.Fprintf(&rules, "  - record: dashboard:expr%d\n    expr: %s\n", i, q)
	}
	path := filepath.Join(t.TempDir(), "rules.yml")
	require.NoError(t, os.WriteFile(path, []byte(rules.String()), 0o600))
	out, err := exec.Command(promtool, "check", "rules", path).CombinedOutput()
	require.NoError(t, err, "promtool check rules (the dashboard's expressions): %s\n%s", out, rules.String())
}

// TestMetrics_ScrapeDoesNotHangOnDeadJetStream: with --nats-url and the server gone, a scrape still
// answers at once (cached JetStream figures, their age growing) and /readyz says not ready.
func TestMetrics_ScrapeDoesNotHangOnDeadJetStream(t *testing.T) {
	listen := freeAddrTB(t)
	ns, err := embedded.StartServer(embedded.ServerConfig{DataDir: t.TempDir(), Listen: listen})
	require.NoError(t, err)
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			ns.Shutdown()
		}
	})
	httpAddr := freeAddrTB(t)
	cmd := exec.Command(daemonBinary(t), "--nats-url", "nats://"+listen, "--http-listen", httpAddr)
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	require.Eventually(t, func() bool { return healthy(httpAddr) }, 30*time.Second, 20*time.Millisecond)
	require.Eventually(t, func() bool { _, ok := getMetrics(t, httpAddr).samples["checkpointd_ingest_queued_messages"]; return ok },
		10*time.Second, 100*time.Millisecond)

	ns.Shutdown()
	ns.WaitForShutdown()
	stopped = true
	var ages []float64
	for range 3 {
		start := time.Now()
		m := getMetrics(t, httpAddr)
		took := time.Since(start)
		require.Less(t, took, 3*time.Second, "a scrape waited on a dead JetStream")
		age, ok := m.samples["checkpointd_state_age_seconds"]
		require.True(t, ok, "the last figures are no longer reported")
		_, ok = m.samples["checkpointd_ingest_queued_messages"]
		require.True(t, ok)
		ages = append(ages, age)
		time.Sleep(time.Second)
	}
	require.True(t, sort.Float64sAreSorted(ages) && ages[2] > ages[0], "the figures' age does not grow: %v", ages)
	resp, err := http.Get("http://" + httpAddr + "/readyz")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
}
