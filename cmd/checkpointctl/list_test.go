package main

import (
	"context"
	"encoding/json"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/testenv"
)

// list --limit N prints N sessions in the order they were created and, on stderr, the --cursor of
// the next page; the pages together hold every session once, in one namespace or across all (-A).
// A limit out of range, or a cursor without a limit, is a usage error.
func TestCheckpointctl_ListLimitPages(t *testing.T) {
	env := testenv.Start(t)
	srv := "--server=" + env.URL()
	ctx := context.Background()
	for _, k := range []checkpoint.Key{{Session: "e"}, {Session: "a"}, {Session: "d"}, {Session: "b"}, {Session: "c"}, {Namespace: "zz", Session: "z"}} {
		_, err := env.Client.Save(ctx, k, []byte(`[]`))
		require.NoError(t, err)
	}
	cursorOf := regexp.MustCompile(`--cursor (\S+)`)
	pages := func(args ...string) (pages [][]string) {
		cursor := ""
		for len(pages) < 10 {
			cmd := append([]string{srv, "list", "--limit", "2", "-o", "json"}, args...)
			if cursor != "" {
				cmd = append(cmd, "--cursor", cursor)
			}
			out, stderr, code := ctl(t, "", cmd...)
			require.Equal(t, 0, code, stderr)
			var heads []checkpoint.Session
			require.NoError(t, json.Unmarshal([]byte(out), &heads))
			var page []string
			for _, h := range heads {
				page = append(page, h.Key.Namespace+"/"+h.Key.Session)
			}
			pages = append(pages, page)
			m := cursorOf.FindStringSubmatch(stderr)
			if m == nil {
				require.Empty(t, stderr)
				return pages
			}
			cursor = m[1]
		}
		t.Fatal("the cursor does not move on")
		return nil
	}
	require.Equal(t, [][]string{{"default/e", "default/a"}, {"default/d", "default/b"}, {"default/c"}}, pages())
	require.Equal(t, [][]string{{"default/e", "default/a"}, {"default/d", "default/b"}, {"default/c", "zz/z"}}, pages("-A"))

	out, stderr, code := ctl(t, "", srv, "list", "--limit", "3")
	require.Equal(t, 0, code, stderr)
	require.Regexp(t, `(?s)NAMESPACE.*default +e .*default +a .*default +d `, out, "a table, in creation order")
	require.Contains(t, stderr, "more: the next page is the same command with --cursor ")

	for _, args := range [][]string{{"--limit", "-1"}, {"--limit", "10001"}, {"--cursor", "x"}} {
		_, stderr, code := ctl(t, "", append([]string{srv, "list"}, args...)...)
		require.Equal(t, exitUsage, code, "%v: %s", args, stderr)
		require.Contains(t, stderr, "--limit", args)
	}
}
