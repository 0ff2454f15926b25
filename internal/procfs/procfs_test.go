package procfs

import (
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestPeakRSS_GrowsWithWhatThisProcessTouches(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("/proc is Linux's")
	}
	before, err := PeakRSS(0)
	require.NoError(t, err)
	b := make([]byte, 64<<20)
	for i := range b {
		b[i] = 1
	}
	after, err := PeakRSS(os.Getpid())
	require.NoError(t, err)
	require.GreaterOrEqual(t, after-before, int64(32<<20))
	runtime.KeepAlive(b)
}

func TestCPUTime_GrowsWithWhatThisProcessComputes(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("/proc is Linux's")
	}
	before, err := CPUTime(0)
	require.NoError(t, err)
	// Compute until getrusage says this process used 300 ms more (however long that takes on a
	// busy machine): /proc must say about as much, in its 10 ms steps.
	start := rusageCPU(t)
	var x uint64
	for rusageCPU(t)-start < 300*time.Millisecond {
		for i := range 100000 {
			x += uint64(i) * x
		}
	}
	after, err := CPUTime(os.Getpid())
	require.NoError(t, err)
	require.GreaterOrEqual(t, after-before, 250*time.Millisecond, "%d", x)
	_, err = CPUTime(1 << 30) // no such process
	require.Error(t, err)
}

// rusageCPU is this process's CPU time (user and system) as getrusage gives it.
func rusageCPU(t *testing.T) time.Duration {
	var ru syscall.Rusage
	require.NoError(t, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func TestReadIO_CountsAFsyncedWrite(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("/proc is Linux's")
	}
	before, err := ReadIO(0)
	require.NoError(t, err)
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	require.NoError(t, err)
	_, err = f.Write(make([]byte, 1<<20))
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	require.NoError(t, f.Close())
	after, err := ReadIO(0)
	require.NoError(t, err)
	if after.Sub(before).WriteBytes == 0 {
		t.Skip("this file system does not count writes in /proc/self/io (tmpfs)")
	}
	require.GreaterOrEqual(t, after.Sub(before).WriteBytes, int64(1<<20))
}

func TestTreeUsage_SumsSizesAndBlocks(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "a", "b"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a", "x"), make([]byte, 10), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a", "b", "y"), make([]byte, 5000), 0o644))
	u, err := TreeUsage(dir)
	require.NoError(t, err)
	require.Equal(t, Usage{Apparent: 5010, Allocated: u.Allocated, Files: 2}, u)
	if runtime.GOOS == "linux" {
		require.GreaterOrEqual(t, u.Allocated, int64(5000), "blocks are allocated in whole units")
	}
}
