package upgrade

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/codec"
	"github.com/checkpointd/checkpointd/internal/procfs"
	"github.com/checkpointd/checkpointd/internal/snapshot"
	"github.com/checkpointd/checkpointd/internal/snapshot/kvstore"
)

// What an upgrade costs, on the fixture and on a larger store written by format 2's own code
// (snapshot.Save over kvstore.Store, as the daemon saves: appends): CP_UPGRADE_SESSIONS sessions
// (default 200) × 20 versions of a real transcript (testdata/corpus/openhands_multi_swe_bench.json,
// 104 messages, 113 KB; version i holds the first i/20 of it). Each iteration upgrades a fresh copy
// of the store and reports:
//
//	upgrade-ms     the upgrade (Run), and f2read-ms: reading every version through format 2 alone
//	               (snapshot.History + Read, the upgrade's own reads), on the same copy, before it
//	x-read         upgrade-ms / f2read-ms: what writing the new format adds to reading the old
//	written-MB     bytes this process sent to storage during Run (/proc/self/io write_bytes: the
//	               embedded server runs in it), and cplog-MB: CP_LOG's size on disk after (du)
//	x-zstd         cplog / the sum of every session's head conversation compressed alone (zstd
//	               default level): the new format's size against the floor
//	conv-MB        the conversations copied (every version, as format 2's reads return them)
//
//	go test -run '^$' -bench Upgrade -benchtime 2x ./internal/upgrade/
func BenchmarkUpgrade_Fixture(b *testing.B) {
	benchUpgrade(b, unpack(b, "store.tar.gz"))
}

func BenchmarkUpgrade_Sessions(b *testing.B) {
	n := 200
	if s := os.Getenv("CP_UPGRADE_SESSIONS"); s != "" {
		var err error
		n, err = strconv.Atoi(s)
		require.NoError(b, err)
	}
	benchUpgrade(b, writeFormat2(b, n, 20))
}

func benchUpgrade(b *testing.B, template string) {
	ctx := context.Background()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		dir := b.TempDir()
		require.NoError(b, exec.Command("cp", "-a", template+"/.", dir).Run())
		s := open(b, dir)
		readTook, floor := readFormat2(b, s)
		before, err := procfs.ReadIO(0)
		require.NoError(b, err)
		b.StartTimer()
		start := time.Now()
		rep, err := Run(ctx, s.js, s.eng, s.log, testOptions())
		took := time.Since(start)
		b.StopTimer()
		require.NoError(b, err)
		after, err := procfs.ReadIO(0)
		require.NoError(b, err)
		du, err := procfs.TreeUsage(filepath.Join(dir, "jetstream", "$G", "streams", "CP_LOG"))
		require.NoError(b, err)
		b.ReportMetric(float64(took.Microseconds())/1e3, "upgrade-ms")
		b.ReportMetric(float64(readTook.Microseconds())/1e3, "f2read-ms")
		b.ReportMetric(float64(took)/float64(readTook), "x-read")
		b.ReportMetric(float64(after.Sub(before).WriteBytes)/1e6, "written-MB")
		b.ReportMetric(float64(du.Apparent)/1e6, "cplog-MB")
		b.ReportMetric(float64(du.Apparent)/float64(floor), "x-zstd")
		b.ReportMetric(float64(rep.ConversationBytes)/1e6, "conv-MB")
		b.Logf("%d sessions, %d versions, %.1f MB of conversations: upgrade %s, format 2's reads alone %s; written %.1f MB, CP_LOG %.2f MB on disk, zstd of every head %.2f MB",
			rep.Sessions, rep.Versions, float64(rep.ConversationBytes)/1e6, took.Round(time.Millisecond), readTook.Round(time.Millisecond),
			float64(after.Sub(before).WriteBytes)/1e6, float64(du.Apparent)/1e6, float64(floor)/1e6)
		s.close()
	}
}

// readFormat2 reads every version of s through format 2's code, as the upgrade does, and returns
// how long it took and the sum of every head conversation compressed alone (zstd default level).
func readFormat2(b *testing.B, s *store) (time.Duration, int64) {
	ctx := context.Background()
	u := &upgrader{js: s.js, opts: testOptions().withDefaults()}
	st, err := u.openFormat2(ctx)
	require.NoError(b, err)
	heads, err := u.format2Heads(ctx)
	require.NoError(b, err)
	enc, err := zstd.NewWriter(nil)
	require.NoError(b, err)
	var floor int64
	var took time.Duration
	for _, h := range heads {
		if !h.Exists() {
			continue
		}
		start := time.Now()
		versions, err := snapshot.History(ctx, st, h.Key)
		require.NoError(b, err)
		cache := &segmentCache{}
		var conv []byte
		for _, v := range versions {
			conv, err = snapshot.Read(ctx, st, v, cache)
			require.NoError(b, err)
		}
		took += time.Since(start)
		floor += int64(len(enc.EncodeAll(conv, nil)))
	}
	return took, floor
}

// writeFormat2 writes a format-2 store of n sessions × versions versions of the transcript with
// format 2's own code and returns its directory (the server stopped).
func writeFormat2(b *testing.B, n, versions int) string {
	ctx := context.Background()
	raw, err := os.ReadFile("../../testdata/corpus/openhands_multi_swe_bench.json")
	require.NoError(b, err)
	c, err := codec.Parse(raw)
	require.NoError(b, err)
	dir := b.TempDir()
	s := open(b, dir)
	st, err := kvstore.OpenStore(ctx, s.js, kvstore.StoreConfig{Replicas: 1, ChunkSize: 64 << 10})
	require.NoError(b, err)
	cut := func(v int) int { return len(c.Messages) * v / versions }
	now := time.Now()
	for i := range n {
		key := snapshot.Key{Namespace: fmt.Sprintf("ns-%d", i%4), Session: fmt.Sprintf("session-%d", i), Agent: "main"}
		for v := 1; v <= versions; v++ {
			req := snapshot.SaveRequest{Key: key, SaveID: fmt.Sprintf("%d-%d", i, v), Writer: "bench", Now: now,
				Payload: append(append([]byte{'['}, c.Span(cut(v-1), cut(v))...), ']')}
			if v > 1 {
				base := uint64(v - 1)
				req.Base = &base
			}
			_, err := snapshot.Save(ctx, st, req)
			require.NoError(b, err, "session %d version %d", i, v)
		}
	}
	s.close()
	return dir
}
