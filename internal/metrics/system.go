package metrics

import (
	"bufio"
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// processIO reports the bytes the daemon's process caused to be written to storage, from
// /proc/self/io (Linux; nothing elsewhere or where /proc is hidden). With the embedded server this
// includes JetStream's writes, the daemon's real write load on the disk.
type processIO struct{}

var writtenDesc = prometheus.NewDesc(namespace+"_process_written_bytes_total",
	"Bytes this process caused to be written to storage (write_bytes of /proc/self/io; the embedded NATS server's writes included).", nil, nil)

func (processIO) Describe(ch chan<- *prometheus.Desc) { ch <- writtenDesc }

func (processIO) Collect(ch chan<- prometheus.Metric) {
	if n, ok := procWriteBytes("/proc/self/io"); ok {
		ch <- prometheus.MustNewConstMetric(writtenDesc, prometheus.CounterValue, float64(n))
	}
}

// procWriteBytes reads the write_bytes line of a /proc/PID/io file.
func procWriteBytes(path string) (uint64, bool) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		if v, ok := bytes.CutPrefix(sc.Bytes(), []byte("write_bytes: ")); ok {
			n, err := strconv.ParseUint(string(v), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// DirSize reports the bytes on disk of a directory tree (the embedded server's data directory) as
// checkpointd_data_dir_bytes. Walking a large store is not free, so the size is recomputed at most
// once per maxAge, by the scrape that finds it stale; the others report the last size.
func DirSize(dir string, maxAge time.Duration) prometheus.Collector {
	return &dirSize{dir: dir, maxAge: maxAge}
}

type dirSize struct {
	dir    string
	maxAge time.Duration

	mu    sync.Mutex
	at    time.Time
	bytes int64
	ok    bool
}

var dirDesc = prometheus.NewDesc(namespace+"_data_dir_bytes",
	"Bytes on disk of the embedded NATS server's data directory (recomputed at most every 30 s).", nil, nil)

func (d *dirSize) Describe(ch chan<- *prometheus.Desc) { ch <- dirDesc }

func (d *dirSize) Collect(ch chan<- prometheus.Metric) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if time.Since(d.at) >= d.maxAge {
		d.bytes, d.ok = treeBytes(d.dir)
		d.at = time.Now()
	}
	if d.ok {
		ch <- prometheus.MustNewConstMetric(dirDesc, prometheus.GaugeValue, float64(d.bytes))
	}
}

// treeBytes sums the sizes of the regular files under dir; files vanishing meanwhile are skipped.
func treeBytes(dir string) (int64, bool) {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, e fs.DirEntry, err error) error {
		if err != nil {
			return nil // a file removed while walking (JetStream compacts): not an error of the size
		}
		if e.Type().IsRegular() {
			if info, err := e.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n, err == nil
}
