package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// lockFileName is the file inside --data-dir that the running checkpointd holds locked. Two embedded
// nats-servers writing one JetStream store lose acknowledged saves, so a second checkpointd on the
// same directory must refuse to start. The lock is flock(2)'s: the kernel lets go of it when the
// process ends however it ends (SIGKILL included), so there is never a stale lock to clean up. The
// file itself stays behind; it only says who held it last.
const lockFileName = "checkpointd.lock"

// dataDirLock is the held lock; release it after the embedded server has shut down.
type dataDirLock struct{ f *os.File }

func (l *dataDirLock) release() { _ = l.f.Close() } // closing the file drops the flock

// lockHolder is what the lock file records about the process that holds it, for the message the
// next one prints.
type lockHolder struct {
	PID   int
	Host  string
	Since time.Time
}

// DataDirInUseError means another process holds the data directory's lock.
type DataDirInUseError struct {
	Dir    string
	Holder lockHolder // zero if the holder had not written who it is yet
}

func (e *DataDirInUseError) Error() string {
	who := "another checkpointd"
	if h := e.Holder; h.PID != 0 {
		who = fmt.Sprintf("checkpointd pid %d on host %s, running since %s", h.PID, h.Host, h.Since.Format(time.RFC3339))
	}
	return fmt.Sprintf("--data-dir %s is in use by %s: two servers on one directory lose saves; "+
		"stop it, or pass another --data-dir", e.Dir, who)
}

// lockDataDir takes dir for this process alone, or says who has it. dir must exist.
func lockDataDir(dir string) (*dataDirLock, error) {
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs // the messages below name it whatever the working directory
	}
	path := filepath.Join(dir, lockFileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("--data-dir %s: cannot write there: %w", dir, err)
	}
	locked, err := tryLock(f)
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("--data-dir %s: locking %s: %w", dir, path, err)
	}
	if !locked {
		defer f.Close()
		return nil, &DataDirInUseError{Dir: dir, Holder: readHolder(f)}
	}
	if err := writeHolder(f, time.Now()); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("--data-dir %s: writing %s: %w", dir, path, err)
	}
	return &dataDirLock{f: f}, nil
}

// writeHolder replaces the lock file's content with this process's pid, host and start time.
func writeHolder(f *os.File, now time.Time) error {
	host, _ := os.Hostname()
	content := fmt.Sprintf("pid=%d\nhost=%s\nsince=%s\n", os.Getpid(), host, now.UTC().Format(time.RFC3339))
	if err := f.Truncate(0); err != nil {
		return err
	}
	_, err := f.WriteAt([]byte(content), 0)
	return err
}

// readHolder reads who holds the lock. The holder writes right after locking, so an empty file
// is read once more a moment later; whatever cannot be read stays zero.
func readHolder(f *os.File) lockHolder {
	for attempt := 0; ; attempt++ {
		h := parseHolder(io.NewSectionReader(f, 0, 4096))
		if h.PID != 0 || attempt == 1 {
			return h
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func parseHolder(r io.Reader) lockHolder {
	var h lockHolder
	data, _ := io.ReadAll(r)
	for _, line := range strings.Split(string(data), "\n") {
		k, v, _ := strings.Cut(line, "=")
		switch k {
		case "pid":
			h.PID, _ = strconv.Atoi(v)
		case "host":
			h.Host = v
		case "since":
			h.Since, _ = time.Parse(time.RFC3339, v)
		}
	}
	return h
}
