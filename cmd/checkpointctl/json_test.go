package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/testenv"
)

// Every command that prints a result takes -o json. restore prints the conversation itself (JSON
// already); help and completion print text for people and shells.
func TestCheckpointctl_EveryCommandHasJSONOutput(t *testing.T) {
	noResult := map[string]bool{"restore": true, "help": true, "completion": true}
	for _, c := range completionSpec().commands {
		if noResult[c.name] {
			continue
		}
		has := false
		for _, f := range c.flags {
			has = has || f.name == "o"
		}
		require.True(t, has, "%s has no -o json", c.name)
	}
}

// -o json prints one JSON document that parses into what the command did: prune, lease, export,
// import, migrate and delete (put, list, history, show, diff, fork: TestCheckpointctl_PutListHistoryShowRestore
// and TestCheckpointctl_ViewsDiffFork).
func TestCheckpointctl_JSONOutput(t *testing.T) {
	src, dst := testenv.Start(t), testenv.Start(t)
	run := func(into any, args ...string) {
		t.Helper()
		out, stderr, code := ctl(t, "", args...)
		require.Equal(t, 0, code, stderr)
		dec := json.NewDecoder(strings.NewReader(out))
		require.NoError(t, dec.Decode(into), out)
		require.False(t, dec.More(), "one JSON document: %s", out)
	}
	s := "--server=" + src.URL()
	var v checkpoint.Version
	run(&v, s, "put", "demo", corpusFile, "-o", "json")
	run(&v, s, "put", "demo", "../../testdata/corpus/pi_before_compaction.json", "-o", "json")
	require.Equal(t, uint64(2), v.Version)

	var pruned []checkpoint.PruneResult
	run(&pruned, s, "prune", "demo", "--keep-last", "1", "--dry-run", "-o", "json")
	require.Len(t, pruned, 1)
	require.Equal(t, []uint64{1}, pruned[0].Versions)
	run(&pruned, s, "prune", "-n", "empty", "--keep-last", "1", "-o", "json")
	require.NotNil(t, pruned, "an empty list, not null")
	require.Empty(t, pruned)

	var l checkpoint.LeaseInfo
	run(&l, s, "lease", "acquire", "demo", "--owner", "ops", "-o", "json")
	require.Equal(t, "ops", l.Owner)
	var released checkpoint.LeaseInfo
	run(&released, s, "lease", "release", "demo", "--epoch", "1", "-o", "json")
	require.Equal(t, uint64(1), released.Epoch)
	require.Empty(t, released.Owner)

	bundle := filepath.Join(t.TempDir(), "demo.cpb")
	var exp exportReport
	run(&exp, s, "export", "demo", "--file", bundle, "-o", "json")
	require.Equal(t, bundle, exp.File)
	require.Equal(t, 2, exp.Versions)
	require.Len(t, exp.Sessions, 1)
	require.Equal(t, []uint64{1, 2}, exp.Sessions[0].Versions)
	_, stderr, code := ctl(t, "", s, "export", "demo", "--file", "-", "-o", "json")
	require.Equal(t, exitUsage, code, "stdout cannot carry both the bundle and the report")
	require.Contains(t, stderr, "needs --file BUNDLE")

	var imp struct {
		Sessions []checkpoint.BundleSession `json:"sessions"`
		Versions int                        `json:"versions"`
		Imported int                        `json:"imported"`
		DryRun   bool                       `json:"dryRun"`
	}
	run(&imp, "--server="+dst.URL(), "import", bundle, "-o", "json")
	require.Equal(t, 2, imp.Imported)
	require.Equal(t, 2, imp.Versions)

	run(&v, s, "put", "other", corpusFile, "-o", "json")
	var mig migrateReport
	run(&mig, "migrate", "--from", src.URL(), "--to", dst.URL(), "other", "-o", "json")
	require.Equal(t, dst.URL(), mig.To)
	require.Equal(t, []checkpoint.Key{{Namespace: "default", Session: "other", Agent: "main"}}, mig.Sessions)
	require.Equal(t, 1, mig.Versions)
	require.Zero(t, mig.AlreadyThere)

	run(&v, "--server="+dst.URL(), "delete", "demo", "-o", "json")
	require.Equal(t, uint64(2), v.Version)
	require.Equal(t, "demo", v.Key.Session)
}
