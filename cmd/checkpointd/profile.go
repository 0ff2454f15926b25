package main

import (
	"fmt"
	"os"
	"runtime/pprof"
)

// startCPUProfile starts a Go CPU profile of the whole process into path (--cpuprofile, or
// CHECKPOINTD_CPUPROFILE), for an operator or a benchmark to see where the daemon and its
// embedded server spend their time; the returned stop finishes and closes the file, at
// shutdown. An empty path profiles nothing. The profile costs little (100 samples a second), but
// it is opt-in: nothing is written unless asked for.
func startCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("--cpuprofile %s: %w", path, err)
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
	}, nil
}
