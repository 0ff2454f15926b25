package metrics

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/checkpointd/checkpointd/internal/procfs"
)

// processIO reports the bytes the daemon's process caused to be written to storage, from
// /proc/self/io (Linux; nothing elsewhere or where /proc is hidden). With the embedded server this
// includes JetStream's writes, the daemon's real write load on the disk.
type processIO struct{}

var writtenDesc = prometheus.NewDesc(namespace+"_process_written_bytes_total",
	"Bytes this process caused to be written to storage (write_bytes of /proc/self/io; the embedded NATS server's writes included).", nil, nil)

func (processIO) Describe(ch chan<- *prometheus.Desc) { ch <- writtenDesc }

func (processIO) Collect(ch chan<- prometheus.Metric) {
	if n, ok := procWriteBytes(); ok {
		ch <- prometheus.MustNewConstMetric(writtenDesc, prometheus.CounterValue, float64(n))
	}
}

// procWriteBytes reads the write_bytes of this process's /proc/self/io.
func procWriteBytes() (uint64, bool) {
	io, err := procfs.ReadIO(0)
	return uint64(io.WriteBytes), err == nil
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
	u, err := procfs.TreeUsage(dir)
	return u.Apparent, err == nil
}
