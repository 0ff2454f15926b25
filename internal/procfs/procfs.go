// Package procfs reads what Linux says about a process and a directory tree: peak memory
// (/proc/PID/status), bytes written to storage (/proc/PID/io) and the size of a tree on disk.
// Benchmarks and metrics measure the daemon with it; elsewhere than Linux every read fails.
package procfs

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// PeakRSS returns the peak resident set size (VmHWM) of process pid, in bytes. pid 0 is this process.
func PeakRSS(pid int) (int64, error) {
	kb, err := field(procPath(pid, "status"), "VmHWM:")
	return kb << 10, err
}

// IO is a process's storage I/O counters (/proc/PID/io), in bytes.
type IO struct {
	// WriteBytes: bytes the process caused to be sent to storage (page cache writeback included).
	WriteBytes int64 `json:"write_bytes"`
	// CancelledWriteBytes: bytes of WriteBytes that never reached storage (a dirty page truncated
	// or its file removed before writeback).
	CancelledWriteBytes int64 `json:"cancelled_write_bytes"`
}

// Net is what reached storage: WriteBytes less CancelledWriteBytes.
func (io IO) Net() int64 { return io.WriteBytes - io.CancelledWriteBytes }

// Sub is the counters' growth since an earlier reading.
func (io IO) Sub(earlier IO) IO {
	return IO{WriteBytes: io.WriteBytes - earlier.WriteBytes, CancelledWriteBytes: io.CancelledWriteBytes - earlier.CancelledWriteBytes}
}

// ReadIO returns the I/O counters of process pid (0: this process).
func ReadIO(pid int) (IO, error) {
	path := procPath(pid, "io")
	w, err := field(path, "write_bytes:")
	if err != nil {
		return IO{}, err
	}
	c, err := field(path, "cancelled_write_bytes:")
	return IO{WriteBytes: w, CancelledWriteBytes: c}, err
}

// Usage is the size of a directory tree's regular files.
type Usage struct {
	Apparent  int64 `json:"apparent_bytes"`  // the sum of their sizes (du -sb)
	Allocated int64 `json:"allocated_bytes"` // the blocks allocated to them (du -s: st_blocks × 512)
	Files     int   `json:"files"`
}

// TreeUsage walks dir and sums its regular files; a file removed while walking (JetStream
// compacting) is skipped, not an error.
func TreeUsage(dir string) (Usage, error) {
	var u Usage
	err := filepath.WalkDir(dir, func(_ string, e fs.DirEntry, err error) error {
		if err != nil || !e.Type().IsRegular() {
			return nil
		}
		info, err := e.Info()
		if err != nil {
			return nil
		}
		u.Files++
		u.Apparent += info.Size()
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			u.Allocated += int64(st.Blocks) * 512
		}
		return nil
	})
	return u, err
}

func procPath(pid int, name string) string {
	if pid == 0 {
		return "/proc/self/" + name
	}
	return fmt.Sprintf("/proc/%d/%s", pid, name)
}

// field returns the first number after prefix on a line of a /proc file.
func field(path, prefix string) (int64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		if rest, ok := bytes.CutPrefix(sc.Bytes(), []byte(prefix)); ok {
			f := bytes.Fields(rest)
			if len(f) == 0 {
				break
			}
			return strconv.ParseInt(string(f[0]), 10, 64)
		}
	}
	return 0, fmt.Errorf("%s: no %q line", path, prefix)
}
