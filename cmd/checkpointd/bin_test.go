package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// binDir holds the checkpointd binary the process tests run, built once per test run.
var (
	binDir   string
	build    sync.Once
	buildErr error
	binPath  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// daemonBinary builds checkpointd (once) and returns its path.
func daemonBinary(t *testing.T) string {
	t.Helper()
	build.Do(func() {
		if binDir, buildErr = os.MkdirTemp("", "checkpointd-bin-"); buildErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "checkpointd")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			buildErr = &buildFailure{err: err, out: string(out)}
		}
	})
	require.NoError(t, buildErr)
	return binPath
}

type buildFailure struct {
	err error
	out string
}

func (b *buildFailure) Error() string { return "go build: " + b.err.Error() + "\n" + b.out }
