package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/testenv"
)

const corpusFile = "../../testdata/corpus/openhands_gui_todo_app.json"

// ctl runs one checkpointctl command line in-process and returns stdout, stderr and the exit code.
func ctl(t *testing.T, stdin string, args ...string) (string, string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	a := &App{Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errOut}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := a.Run(ctx, args)
	if err != nil && !errors.Is(err, flag.ErrHelp) { // as main prints it
		errOut.WriteString("checkpointctl: " + err.Error() + "\n")
	}
	return out.String(), errOut.String(), exitCode(err)
}

func requireSameJSON(t *testing.T, want, got []byte) {
	t.Helper()
	testenv.RequireSameConversation(t, want, got)
}

func TestCheckpointctl_PutListHistoryShowRestore(t *testing.T) {
	env := testenv.Start(t)
	srv := "--server=" + env.URL()
	file, err := os.ReadFile(corpusFile)
	require.NoError(t, err)

	out, stderr, code := ctl(t, "", srv, "put", "demo", corpusFile)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "saved demo version 1 (18 messages")

	out, stderr, code = ctl(t, string(file[:len(file)-2])+`,{"role":"user","content":"more"}]`, srv, "put", "demo", "-", "-o", "json")
	require.Equal(t, 0, code, stderr)
	var v checkpoint.Version
	require.NoError(t, json.Unmarshal([]byte(out), &v))
	require.Equal(t, uint64(2), v.Version)
	require.Equal(t, 19, v.Counts.Messages)

	out, _, code = ctl(t, "", srv, "restore", "demo", "--version", "1")
	require.Equal(t, 0, code)
	requireSameJSON(t, file, []byte(out))

	out, _, code = ctl(t, "", srv, "list", "-o", "json")
	require.Equal(t, 0, code)
	var heads []checkpoint.Version
	require.NoError(t, json.Unmarshal([]byte(out), &heads))
	require.Len(t, heads, 1)
	require.Equal(t, "demo", heads[0].Key.Session)
	require.Equal(t, uint64(2), heads[0].Version)

	out, _, code = ctl(t, "", srv, "list")
	require.Equal(t, 0, code)
	require.Contains(t, out, "NAMESPACE")
	require.Contains(t, out, "demo")

	out, _, code = ctl(t, "", srv, "history", "demo", "-o", "json")
	require.Equal(t, 0, code)
	var hist []checkpoint.Version
	require.NoError(t, json.Unmarshal([]byte(out), &hist))
	require.Equal(t, []uint64{1, 2}, []uint64{hist[0].Version, hist[1].Version})

	out, _, code = ctl(t, "", srv, "history", "demo")
	require.Equal(t, 0, code)
	require.Contains(t, out, "VERSION")
	require.Equal(t, 3, strings.Count(out, "\n"), out)

	// --limit N: the newest N (read newest first), shown oldest first.
	out, _, code = ctl(t, "", srv, "history", "demo", "--limit", "1", "-o", "json")
	require.Equal(t, 0, code)
	hist = nil
	require.NoError(t, json.Unmarshal([]byte(out), &hist))
	require.Len(t, hist, 1)
	require.Equal(t, uint64(2), hist[0].Version)

	out, _, code = ctl(t, "", srv, "show", "demo", "--version", "1")
	require.Equal(t, 0, code)
	require.Contains(t, out, "1 (parent 0)")
	require.Contains(t, out, "18: 1 user, 5 assistant, 4 toolResult, 8 extension")

	// Namespaces and agents are separate sessions.
	_, stderr, code = ctl(t, "", srv, "put", "demo", corpusFile, "-n", "team a", "--agent", "planner")
	require.Equal(t, 0, code, stderr)
	out, _, _ = ctl(t, "", srv, "list", "-A", "-o", "json")
	require.NoError(t, json.Unmarshal([]byte(out), &heads))
	require.Len(t, heads, 2)
	out, _, code = ctl(t, "", srv, "list", "-A")
	require.Equal(t, 0, code)
	require.Contains(t, out, `"team a"`, "ids with spaces are quoted in tables")
}

func TestCheckpointctl_ExitCodes(t *testing.T) {
	env := testenv.Start(t)
	srv := "--server=" + env.URL()
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	require.NoError(t, os.WriteFile(bad, []byte(`[{"role":"user","content":"a"},{"role":"robot","content":"b"}]`), 0o600))
	empty := filepath.Join(dir, "empty.json")
	require.NoError(t, os.WriteFile(empty, nil, 0o600))
	_, _, code := ctl(t, "", srv, "put", "s", corpusFile)
	require.Equal(t, 0, code)

	cases := []struct {
		name   string
		args   []string
		code   int
		stderr []string
	}{
		{"unknown session", []string{srv, "restore", "nope"}, exitNotFound, []string{"not found"}},
		{"unknown version", []string{srv, "show", "s", "--version", "9"}, exitNotFound, []string{"version 9"}},
		{"stale expected version", []string{srv, "put", "s", corpusFile, "--expect-version", "0"}, exitConflict, []string{"head is version 1", "--expect-version 1"}},
		{"invalid conversation", []string{srv, "put", "s", bad}, exitInvalid, []string{"message 1", "role", `"robot"`}},
		{"empty file", []string{srv, "put", "s", empty}, exitInvalid, []string{"empty"}},
		{"missing file", []string{srv, "put", "s", filepath.Join(dir, "nope.json")}, exitUsage, []string{"no such file"}},
		{"unknown command", []string{srv, "frobnicate"}, exitUsage, []string{"unknown command", "restore"}},
		{"missing argument", []string{srv, "restore"}, exitUsage, []string{"SESSION"}},
		{"bad flag value", []string{srv, "restore", "s", "--version", "latest"}, exitUsage, []string{"version number"}},
		{"bad output format", []string{srv, "list", "-o", "yaml"}, exitUsage, []string{"table or json"}},
		{"nothing listening", []string{"--server=nats://127.0.0.1:1", "--timeout=2s", "list"}, exitUnavailable, []string{"127.0.0.1:1"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, stderr, code := ctl(t, "", tc.args...)
			require.Equal(t, tc.code, code, stderr)
			for _, s := range tc.stderr {
				require.Contains(t, stderr, s)
			}
		})
	}
	_, _, code = ctl(t, "", "--help")
	require.Equal(t, 0, code, "help is not an error")
}

func TestParseInterspersed(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		want    []string
		version string
	}{
		{[]string{"s"}, []string{"s"}, ""},
		{[]string{"s", "--version", "3"}, []string{"s"}, "3"},
		{[]string{"--version=3", "s", "f"}, []string{"s", "f"}, "3"},
		{[]string{"s", "--version", "3", "f"}, []string{"s", "f"}, "3"},
		{[]string{"s", "--", "--version", "-"}, []string{"s", "--version", "-"}, ""},
		{[]string{"-", "s"}, []string{"-", "s"}, ""},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		var v versionFlag
		fs.Var(&v, "version", "")
		got, err := parseInterspersed(fs, tc.args)
		require.NoError(t, err, tc.args)
		require.Equal(t, tc.want, got, tc.args)
		require.Equal(t, tc.version, v.String(), tc.args)
	}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(&bytes.Buffer{})
	_, err := parseInterspersed(fs, []string{"s", "--nope"})
	var ue usageError
	require.True(t, errors.As(err, &ue))
}

// The documented invocations as a real process: stdout carries exactly the conversation, and the
// exit codes are the process's own.
func TestCheckpointctl_Binary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	env := testenv.Start(t)
	bin := filepath.Join(t.TempDir(), "checkpointctl")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "%s", out)
	file, err := os.ReadFile(corpusFile)
	require.NoError(t, err)

	out, err = exec.Command(bin, "--server", env.URL(), "put", "proc", corpusFile).CombinedOutput()
	require.NoError(t, err, "%s", out)
	cmd := exec.Command(bin, "--server", env.URL(), "restore", "proc")
	cmd.Stderr = os.Stderr
	stdout, err := cmd.Output()
	require.NoError(t, err)
	requireSameJSON(t, file, stdout)

	err = exec.Command(bin, "--server", env.URL(), "restore", "missing").Run()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	require.Equal(t, exitNotFound, ee.ExitCode())

	requireWatchEndsOnInterrupt(t, bin, env)
}

// watch as a process: it prints a saved version as it comes, and Ctrl-C (SIGINT) ends it with exit 0.
func requireWatchEndsOnInterrupt(t *testing.T, bin string, env *testenv.Env) {
	t.Helper()
	watch := exec.Command(bin, "--server", env.URL(), "watch", "proc")
	var stderr lockedBuffer
	watch.Stderr = &stderr
	stdout, err := watch.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, watch.Start())
	lines := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		lines <- line
	}()
	probe := env.Conn() // a forged result on stderr says the watch is subscribed
	require.Eventually(t, func() bool {
		require.NoError(t, probe.Publish("cp.result.default.forged", []byte("not a result")))
		require.NoError(t, probe.Flush())
		return strings.Contains(stderr.String(), "forged")
	}, 10*time.Second, 20*time.Millisecond)
	out, err := exec.Command(bin, "--server", env.URL(), "put", "proc", corpusFile).CombinedOutput()
	require.NoError(t, err, "%s", out)
	select {
	case line := <-lines:
		require.Contains(t, line, "proc  agent main  version 2  manual  by ")
	case <-time.After(10 * time.Second):
		t.Fatal("watch printed no line")
	}
	require.NoError(t, watch.Process.Signal(os.Interrupt))
	require.NoError(t, watch.Wait(), "exit 0 on Ctrl-C; stderr: %s", stderr.String())
}

func TestCheckpointctl_ViewsDiffFork(t *testing.T) {
	env := testenv.Start(t)
	srv := "--server=" + env.URL()
	conv := `[{"role":"user","content":"a"},{"role":"extension","kind":"compaction","data":{"summary":"s"}},` +
		`{"role":"user","content":"b"},{"role":"assistant","content":[{"type":"text","text":"c"}]}]`
	_, stderr, code := ctl(t, conv, srv, "put", "s", "-")
	require.Equal(t, 0, code, stderr)
	edited := strings.Replace(conv, `"content":"b"`, `"content":"B"`, 1)
	edited = edited[:len(edited)-1] + `,{"role":"user","content":"d"}]`
	_, stderr, code = ctl(t, edited, srv, "put", "s", "-")
	require.Equal(t, 0, code, stderr)

	out, _, code := ctl(t, "", srv, "restore", "s", "--view", "request", "--version", "1")
	require.Equal(t, 0, code)
	require.Equal(t, `[{"role":"extension","kind":"compaction","data":{"summary":"s"}},{"role":"user","content":"b"},{"role":"assistant","content":[{"type":"text","text":"c"}]}]`, out)
	out, _, code = ctl(t, "", srv, "restore", "s", "--max-messages", "2")
	require.Equal(t, 0, code)
	require.Equal(t, `[{"role":"assistant","content":[{"type":"text","text":"c"}]},{"role":"user","content":"d"}]`, out)

	out, _, code = ctl(t, "", srv, "diff", "s", "1", "2")
	require.Equal(t, 0, code)
	require.Contains(t, out, `~ [2] {"role":"user","content":"b"}`)
	require.Contains(t, out, `→ {"role":"user","content":"B"}`)
	require.Contains(t, out, `+ [4] {"role":"user","content":"d"}`)
	out, _, code = ctl(t, "", srv, "diff", "s", "1", "1")
	require.Equal(t, 0, code)
	require.Equal(t, "no differences\n", out)

	out, stderr, code = ctl(t, "", srv, "fork", "s", "s2", "--version", "1")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "forked s version 1 into s2")
	out, _, code = ctl(t, "", srv, "show", "s2")
	require.Equal(t, 0, code)
	require.Contains(t, out, "forked from:  s version 1")
	_, _, code = ctl(t, "", srv, "fork", "s", "s2")
	require.Equal(t, exitConflict, code)
	_, _, code = ctl(t, "", srv, "restore", "s", "--view", "everything")
	require.Equal(t, exitUsage, code, "an unknown view is a usage mistake (issue 14 item 5)")
}

func TestCheckpointctl_MergedView(t *testing.T) {
	env := testenv.Start(t)
	srv := "--server=" + env.URL()
	_, stderr, code := ctl(t, `[{"role":"user","content":"a","timestamp":1}]`, srv, "put", "s", "-", "--agent", "x")
	require.Equal(t, 0, code, stderr)
	_, stderr, code = ctl(t, `[{"role":"user","content":"b","timestamp":0}]`, srv, "put", "s", "-", "--agent", "y")
	require.Equal(t, 0, code, stderr)
	out, stderr, code := ctl(t, "", srv, "restore", "s", "--merged", "--agent-prefix")
	require.Equal(t, 0, code, stderr)
	require.Equal(t, `[{"role":"user","content":"[y] b","timestamp":0,"agentId":"y"},{"role":"user","content":"[x] a","timestamp":1,"agentId":"x"}]`, out)
	_, _, code = ctl(t, "", srv, "restore", "s", "--merged", "--version", "1")
	require.Equal(t, exitUsage, code)
}

func TestCheckpointctl_Prune(t *testing.T) {
	env := testenv.Start(t)
	srv := "--server=" + env.URL()
	conv := `[{"role":"user","content":"a"}`
	for i := range 4 {
		conv += `,{"role":"user","content":"` + strings.Repeat("x", i+1) + `"}`
		_, stderr, code := ctl(t, conv+"]", srv, "put", "s", "-")
		require.Equal(t, 0, code, stderr)
	}

	out, stderr, code := ctl(t, "", srv, "prune", "s", "--keep-last", "1", "--dry-run")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "WOULD REMOVE")
	require.Contains(t, out, "versions 1-3 (3)")
	_, _, code = ctl(t, "", srv, "restore", "s", "--version", "1")
	require.Equal(t, 0, code, "a dry run removes nothing")

	out, stderr, code = ctl(t, "", srv, "prune", "s", "--keep-last", "2")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "versions 1-2 (2)")
	_, stderr, code = ctl(t, "", srv, "restore", "s", "--version", "2")
	require.Equal(t, exitNotFound, code)
	require.Contains(t, stderr, "pruned by retention; the oldest kept is version 3")
	require.Equal(t, 1, strings.Count(stderr, "version 2:"), "the version is named once: %s", stderr)
	out, _, code = ctl(t, "", srv, "restore", "s", "--version", "3")
	require.Equal(t, 0, code)
	require.Equal(t, `[{"role":"user","content":"a"},{"role":"user","content":"x"},{"role":"user","content":"xx"},{"role":"user","content":"xxx"}]`, out)

	out, _, code = ctl(t, "", srv, "prune", "s", "--keep-last", "1", "--dry-run")
	require.Equal(t, 0, code)
	require.Regexp(t, `s\s+main\s+version 3\s+1\n`, out, "one version is named as one")
	out, _, code = ctl(t, "", srv, "prune", "s", "--keep-last", "1", "-o", "json")
	require.Equal(t, 0, code)
	require.Contains(t, out, `"versions": [`)
	out, _, code = ctl(t, "", srv, "prune", "s", "--keep-last", "1")
	require.Equal(t, 0, code)
	require.Equal(t, "nothing to prune\n", out, "the head is always kept")
}

// The same large image in two sessions of a namespace is stored once: the second save stores a
// few hundred bytes, and both restore exactly, also after the first session is deleted.
func TestCheckpointctl_SharedImageStoredOnce(t *testing.T) {
	env := testenv.Start(t)
	srv := "--server=" + env.URL()
	img := make([]byte, 300<<10) // a screenshot compresses little: random bytes stand in
	_, err := rand.Read(img)
	require.NoError(t, err)
	conv := func(text string) string {
		return `[{"role":"user","content":[{"type":"text","text":"` + text + `"},{"type":"image","data":"` +
			base64.StdEncoding.EncodeToString(img) + `","mimeType":"image/png"}]}]`
	}
	for _, s := range []string{"a", "b"} {
		_, stderr, code := ctl(t, conv("session "+s), srv, "put", s, "-", "-n", "team")
		require.Equal(t, 0, code, stderr)
	}
	stored := func(s string) int64 {
		out, _, code := ctl(t, "", srv, "history", s, "-n", "team", "-o", "json")
		require.Equal(t, 0, code)
		var hist []checkpoint.Version
		require.NoError(t, json.Unmarshal([]byte(out), &hist))
		return hist[0].StoredBytes
	}
	require.Greater(t, stored("a"), int64(200<<10), "the first session stores the image")
	require.Less(t, stored("b"), int64(4<<10), "the second refers to it")

	_, _, code := ctl(t, "", srv, "delete", "a", "-n", "team")
	require.Equal(t, 0, code)
	out, _, code := ctl(t, "", srv, "restore", "b", "-n", "team")
	require.Equal(t, 0, code)
	requireSameJSON(t, []byte(conv("session b")), []byte(out))
}

func TestCheckpointctl_PutAppendTo(t *testing.T) {
	env := testenv.Start(t)
	srv := "--server=" + env.URL()
	_, stderr, code := ctl(t, `[{"role":"user","content":"a"}]`, srv, "put", "s", "-", "--append-to", "0")
	require.Equal(t, 0, code, stderr)
	out, stderr, code := ctl(t, `[{"role":"user","content":"b"},{"role":"user","content":"c"}]`, srv, "put", "s", "-", "--append-to", "1")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "saved s version 2 (3 messages")
	out, _, code = ctl(t, "", srv, "restore", "s")
	require.Equal(t, 0, code)
	require.Equal(t, `[{"role":"user","content":"a"},{"role":"user","content":"b"},{"role":"user","content":"c"}]`, out)

	_, stderr, code = ctl(t, `[{"role":"user","content":"d"}]`, srv, "put", "s", "-", "--append-to", "1")
	require.Equal(t, exitConflict, code, stderr)
	require.Contains(t, stderr, "--append-to 2")
	_, stderr, code = ctl(t, `[{"role":"robot","content":"d"}]`, srv, "put", "s", "-", "--append-to", "2")
	require.Equal(t, exitInvalid, code, stderr)
	require.Contains(t, stderr, `"robot"`)
	_, stderr, code = ctl(t, `[]`, srv, "put", "s", "-", "--append-to", "2", "--expect-version", "2")
	require.Equal(t, exitUsage, code, stderr)
	out, _, _ = ctl(t, "", srv, "history", "s", "-o", "json")
	var hist []checkpoint.Version
	require.NoError(t, json.Unmarshal([]byte(out), &hist))
	require.Len(t, hist, 2, "refused appends store nothing")
}
