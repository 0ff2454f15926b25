package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The container (Dockerfile, .dockerignore at the repository root). No container engine runs here,
// so these tests check the Dockerfile's rules and run the binary exactly as the image would: as its
// unprivileged user, with its environment, on a fresh /data as a new named volume would be.

// dockerInstr is one instruction of a Dockerfile: its keyword (upper case) and the rest of the line,
// continuation lines joined.
type dockerInstr struct{ cmd, args string }

// finalStage reads ../../Dockerfile and returns the instructions of its last stage.
func finalStage(t *testing.T) []dockerInstr {
	t.Helper()
	data, err := os.ReadFile("../../Dockerfile")
	require.NoError(t, err)
	var all []dockerInstr
	var cur strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if cur.Len() == 0 && (line == "" || strings.HasPrefix(line, "#")) {
			continue
		}
		if strings.HasPrefix(line, "#") { // a comment inside a continued instruction
			continue
		}
		if s, ok := strings.CutSuffix(line, "\\"); ok {
			cur.WriteString(s + " ")
			continue
		}
		cur.WriteString(line)
		cmd, args, _ := strings.Cut(cur.String(), " ")
		all = append(all, dockerInstr{strings.ToUpper(cmd), strings.Join(strings.Fields(args), " ")})
		cur.Reset()
	}
	last := 0
	for i, in := range all {
		if in.cmd == "FROM" {
			last = i
		}
	}
	return all[last:]
}

// imageUID is the numeric user of the final stage (USER uid[:gid]), and whether it is set.
func imageUID(t *testing.T, stage []dockerInstr) (uint32, bool) {
	for _, in := range stage {
		if in.cmd == "USER" {
			u, _, _ := strings.Cut(in.args, ":")
			n, err := strconv.ParseUint(u, 10, 32)
			require.NoError(t, err, "USER %q: give a numeric uid, so that runAsNonRoot can check it", in.args)
			return uint32(n), true
		}
	}
	return 0, false
}

// dataDirOwner is the uid the image's /data belongs to (COPY --chown=UID... /data), and whether the
// image creates /data at all (if not, a new named volume is root's).
func dataDirOwner(stage []dockerInstr) (uint32, bool) {
	for _, in := range stage {
		f := strings.Fields(in.args)
		if in.cmd != "COPY" || len(f) == 0 || f[len(f)-1] != "/data" {
			continue
		}
		for _, opt := range f {
			if v, ok := strings.CutPrefix(opt, "--chown="); ok {
				u, _, _ := strings.Cut(v, ":")
				if n, err := strconv.ParseUint(u, 10, 32); err == nil {
					return uint32(n), true
				}
			}
		}
	}
	return 0, false
}

// imageEnv is the final stage's ENV, as KEY=VALUE pairs.
func imageEnv(stage []dockerInstr) map[string]string {
	env := map[string]string{}
	for _, in := range stage {
		if in.cmd != "ENV" {
			continue
		}
		for _, kv := range strings.Fields(in.args) {
			if k, v, ok := strings.Cut(kv, "="); ok {
				env[k] = v
			}
		}
	}
	return env
}

// TestDockerfile_Lint checks the rules the image must keep: a non-root numeric USER, /data made and
// owned by that user before VOLUME /data, listening on every interface on the published ports, a
// HEALTHCHECK the image can run (exec form, the binary itself), exec-form ENTRYPOINT, pinned base
// images, and a .dockerignore that keeps data directories, bin/, .git and everything git ignores out
// of the build context.
func TestDockerfile_Lint(t *testing.T) {
	stage := finalStage(t)
	uid, ok := imageUID(t, stage)
	require.True(t, ok, "the final stage sets no USER")
	require.NotZero(t, uid, "USER is root")
	owner, ok := dataDirOwner(stage)
	require.True(t, ok, "the image does not create /data (COPY --chown=UID:GID ... /data): a new named volume would be root's")
	require.Equal(t, uid, owner, "/data is not owned by the image's USER")

	var volumeAfterData, healthcheck, entrypoint bool
	sawData := false
	for _, in := range stage {
		switch in.cmd {
		case "COPY":
			if strings.HasSuffix(in.args, " /data") {
				sawData = true
			}
		case "VOLUME":
			volumeAfterData = sawData && strings.Contains(in.args, "/data")
		case "HEALTHCHECK":
			_, cmd, ok := strings.Cut(in.args, "CMD ")
			require.True(t, ok, "HEALTHCHECK without CMD: %s", in.args)
			var argv []string
			require.NoError(t, json.Unmarshal([]byte(cmd), &argv), "HEALTHCHECK CMD must be exec form (the image has no shell): %s", cmd)
			require.Equal(t, []string{"/usr/local/bin/checkpointd", healthcheckCommand}, argv)
			healthcheck = true
		case "ENTRYPOINT":
			var argv []string
			require.NoError(t, json.Unmarshal([]byte(in.args), &argv), "ENTRYPOINT must be exec form, so signals reach the daemon")
			entrypoint = len(argv) > 0 && argv[0] == "/usr/local/bin/checkpointd"
		case "FROM":
			image := strings.Fields(in.args)[0]
			require.Contains(t, image, ":", "base image %s without a tag", image)
			require.NotContains(t, image, ":latest", "base image %s", image)
		}
	}
	require.True(t, volumeAfterData, "VOLUME /data must come after /data is created and owned")
	require.True(t, healthcheck, "no HEALTHCHECK")
	require.True(t, entrypoint, "no ENTRYPOINT running checkpointd")

	env := imageEnv(stage)
	require.Equal(t, "/data", env["CHECKPOINTD_DATA_DIR"])
	require.Equal(t, "0.0.0.0:4222", env["CHECKPOINTD_NATS_LISTEN"], "inside a container the daemon must listen on every interface")
	require.Equal(t, "0.0.0.0:9333", env["CHECKPOINTD_HTTP_LISTEN"])

	ignore, err := os.ReadFile("../../.dockerignore")
	require.NoError(t, err, "no .dockerignore: COPY . . would copy a local data directory into the image")
	ignored := map[string]bool{}
	for _, l := range strings.Split(string(ignore), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			ignored[strings.Trim(l, "/")] = true
		}
	}
	for _, want := range []string{".git", "bin", "checkpointd-data"} {
		require.True(t, ignored[want], ".dockerignore does not keep %s out of the build context", want)
	}
	gitignore, err := os.ReadFile("../../.gitignore")
	require.NoError(t, err)
	for _, l := range strings.Split(string(gitignore), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			require.True(t, ignored[strings.Trim(l, "/")], ".dockerignore lacks %q, which .gitignore has", l)
		}
	}
}

// TestContainer_EntrypointAsUnprivilegedUser runs the daemon as the image does: as the image's USER,
// with the image's environment (ports changed to free ones), no arguments, on a fresh directory
// owned as the image's /data is (a new named volume copies it). The daemon must come up, and
// `checkpointd healthcheck` (the HEALTHCHECK), run the same way, must pass.
func TestContainer_EntrypointAsUnprivilegedUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run the binary as another user")
	}
	stage := finalStage(t)
	uid, ok := imageUID(t, stage)
	require.True(t, ok, "the final stage sets no USER")

	// Everything the unprivileged user reaches: world-traversable, unlike t.TempDir.
	root, err := os.MkdirTemp("", "checkpointd-image-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(root) })
	require.NoError(t, os.Chmod(root, 0o755))
	bin := filepath.Join(root, "checkpointd")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	data := filepath.Join(root, "data")
	require.NoError(t, os.Mkdir(data, 0o755))
	if owner, ok := dataDirOwner(stage); ok { // else Docker makes the volume root's: leave it so
		require.NoError(t, os.Chown(data, int(owner), int(owner)))
	}

	env := []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/"}
	for k, v := range imageEnv(stage) {
		switch k {
		case "CHECKPOINTD_DATA_DIR":
			v = data
		case "CHECKPOINTD_NATS_LISTEN", "CHECKPOINTD_HTTP_LISTEN":
			_, port, _ := strings.Cut(freeAddrTB(t), ":")
			v = "0.0.0.0:" + port
		}
		env = append(env, k+"="+v)
	}
	asImageUser := func(args ...string) *exec.Cmd {
		cmd := exec.Command(bin, args...)
		cmd.Env = env
		cmd.Dir = "/"
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
		return cmd
	}

	daemon := asImageUser()
	var logs bytes.Buffer
	daemon.Stderr = &lockedWriter{w: &logs}
	require.NoError(t, daemon.Start())
	exited := make(chan struct{})
	go func() { _ = daemon.Wait(); close(exited) }()
	t.Cleanup(func() { _ = daemon.Process.Signal(syscall.SIGKILL); <-exited })

	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-exited:
			t.Fatalf("the daemon exited as uid %d on a fresh /data: %v\n%s", uid, daemon.ProcessState, logs.String())
		default:
		}
		check := asImageUser(healthcheckCommand)
		out, err := check.CombinedOutput()
		if err == nil {
			require.Equal(t, "ok\n", string(out))
			break
		}
		require.True(t, time.Now().Before(deadline), "healthcheck never passed: %s\n%s", out, logs.String())
		time.Sleep(100 * time.Millisecond)
	}
	// The store is the image user's, inside /data.
	var st syscall.Stat_t
	require.NoError(t, syscall.Stat(filepath.Join(data, "jetstream"), &st))
	require.Equal(t, uid, st.Uid)

	require.NoError(t, daemon.Process.Signal(syscall.SIGTERM))
	select {
	case <-exited:
		require.True(t, daemon.ProcessState.Success(), "SIGTERM: %v\n%s", daemon.ProcessState, logs.String())
	case <-time.After(30 * time.Second):
		t.Fatal("no graceful exit on SIGTERM")
	}
}

// TestHealthcheck_Command covers `checkpointd healthcheck` without a daemon: the wildcard address
// maps to loopback, and nothing listening means exit 1 with what to check.
func TestHealthcheck_Command(t *testing.T) {
	u, err := healthzURL("0.0.0.0:9333")
	require.NoError(t, err)
	require.Equal(t, "http://127.0.0.1:9333/healthz", u)
	u, err = healthzURL("[::]:9")
	require.NoError(t, err)
	require.Equal(t, "http://127.0.0.1:9/healthz", u)
	u, err = healthzURL("10.1.2.3:9333")
	require.NoError(t, err)
	require.Equal(t, "http://10.1.2.3:9333/healthz", u)
	for _, asURL := range []string{"http://10.1.2.3:9333", "http://10.1.2.3:9333/", "http://10.1.2.3:9333/healthz"} {
		u, err = healthzURL(asURL)
		require.NoError(t, err, asURL)
		require.Equal(t, "http://10.1.2.3:9333/healthz", u, asURL)
	}
	_, err = healthzURL("http://10.1.2.3:9333/metrics") // another path is not this check's
	require.Error(t, err)
	var stdout, stderr bytes.Buffer
	require.Equal(t, 2, healthcheck([]string{"nope"}, &stdout, &stderr))
	require.Contains(t, stderr.String(), `"nope"`)
	stderr.Reset()
	require.Equal(t, 1, healthcheck([]string{freeAddrTB(t)}, &stdout, &stderr))
	require.Contains(t, stderr.String(), "is checkpointd running")
}
