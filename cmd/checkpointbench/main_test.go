package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The whole benchmark at its tiniest scale: every section runs against a real checkpointd
// process, and the JSON it prints parses back into a report that prints as text. Redis and
// PostgreSQL are measured when installed and said to be skipped otherwise.
func TestRun_EverySectionAtTheTiniestScale(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs checkpointd")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	err := run(ctx, []string{"-o", "json", "--iterations", "3", "--ingest-phase", "200ms", "--ingest-rounds", "1",
		"--turns", "4", "--pace", "0s", "--settle", "200ms", "--sessions", "20", "--small-sessions", "10",
		"--versions", "12", "--small-versions", "3", "--large-bytes", "1048576"}, &stdout, &stderr)
	require.NoError(t, err, stderr.String())

	var rep report
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &rep), stdout.String())
	require.Equal(t, "custom", rep.Scale.Name)
	bySection := map[string]int{}
	for _, tb := range rep.Tables {
		require.NotEmpty(t, tb.Rows, tb.Title)
		for _, r := range tb.Rows {
			require.Len(t, r.Cells, len(tb.Columns), "%s: %v", tb.Title, r.Cells)
		}
		bySection[tb.Section]++
	}
	for _, s := range sectionNames() {
		require.NotZero(t, bySection[s], "section %s printed no table", s)
	}
	// Every target of the issue has its row: 7 latency, 1 ingest, 4 disk, 3 rivals, 2 scale, 1 memory.
	require.Len(t, rep.Summary, 18)
	// The rows whose comparison leaves out work checkpointd must do say what the parts alone take
	// with it: the three restores (the SHA-256 check), the 50 agents (validation, hash, compression)
	// and the bytes written (raw JetStream's own).
	var floors []string
	for _, s := range rep.Summary {
		if strings.HasPrefix(s.Row, "restore head") || strings.HasPrefix(s.Row, "daemon write_bytes") ||
			strings.Contains(s.Row, "AppendAsync") {
			require.NotEmpty(t, s.Floor, s.Row)
			floors = append(floors, s.Floor)
		}
	}
	require.Len(t, floors, 5)

	var text bytes.Buffer
	require.NoError(t, rep.writeText(&text))
	// Among them a floor after a verdict, and the groups read from the daemon's /metrics.
	for _, want := range []string{"$ checkpointbench -o json", "## Summary:", "restore head", "write_bytes", "raw JetStream, the same turns alike", "Redis", "VmHWM",
		"; direct get + zstd decode + SHA-256 check, in turn: ", "per request on average"} {
		require.Contains(t, text.String(), want)
	}
}

func TestParseOptions(t *testing.T) {
	o, err := parseOptions([]string{"--full", "--pace", "1s"}, io.Discard)
	require.NoError(t, err)
	require.Equal(t, "custom", o.scale.Name)
	require.Equal(t, time.Second, o.scale.Pace)
	require.Equal(t, fullScale.Sessions, o.scale.Sessions)

	o, err = parseOptions(nil, io.Discard)
	require.NoError(t, err)
	require.Equal(t, quickScale, o.scale)
	require.True(t, o.wants("disk"))

	o, err = parseOptions([]string{"--only", "disk,Latency"}, io.Discard)
	require.NoError(t, err)
	require.True(t, o.wants("latency"))
	require.False(t, o.wants("rivals"))

	for _, bad := range [][]string{{"--only", "speed"}, {"--quick", "--full"}, {"-o", "yaml"}, {"--iterations", "0"}, {"extra"}} {
		_, err := parseOptions(bad, io.Discard)
		require.Error(t, err, "%v", bad)
	}
}

// Without Redis and PostgreSQL the rivals section still measures checkpointd and raw JetStream,
// and says which targets it could not check, and why.
func TestRun_RivalsSkippedWhenNotInstalled(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs checkpointd")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	err := run(ctx, []string{"-o", "json", "-q", "--only", "rivals", "--iterations", "2",
		"--redis-server", "no-such-redis-server", "--postgres-bin", t.TempDir()}, &stdout, &stderr)
	require.NoError(t, err, stderr.String())
	var rep report
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &rep))
	require.Len(t, rep.Summary, 3)
	for _, s := range rep.Summary {
		require.True(t, s.Skipped, s.Row)
		require.False(t, s.Met, s.Row)
	}
	notes := rep.Tables[0].Notes
	require.Contains(t, strings.Join(notes, "\n"), "no-such-redis-server not found")
	require.Contains(t, strings.Join(notes, "\n"), "postgres not found")
}
