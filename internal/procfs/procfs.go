// Package procfs reads what Linux says about a process and a directory tree: peak memory
// (/proc/PID/status), bytes written to storage (/proc/PID/io), CPU time (/proc/PID/stat) and the
// size of a tree on disk.
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
	"time"
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

// clockTicks is the unit of /proc/PID/stat's times (USER_HZ): 100 per second on every Linux
// architecture Go supports (sysconf(_SC_CLK_TCK) needs cgo to ask).
const clockTicks = 100

// CPUTime returns the CPU time process pid (0: this process) has used so far, user and system,
// all its threads; in steps of 10 ms.
func CPUTime(pid int) (time.Duration, error) {
	path := procPath(pid, "stat")
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	// The command name, field 2, is in parentheses and may hold spaces: count from after it.
	end := bytes.LastIndexByte(data, ')')
	if end < 0 {
		return 0, fmt.Errorf("%s: no command name", path)
	}
	f := bytes.Fields(data[end+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("%s: %d fields after the command name, want at least 13", path, len(f))
	}
	var ticks int64
	for _, s := range f[11:13] { // utime and stime, fields 14 and 15
		n, err := strconv.ParseInt(string(s), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", path, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
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
