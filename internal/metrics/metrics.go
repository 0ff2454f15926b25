// Package metrics owns checkpointd's Prometheus collectors and its HTTP endpoints (/metrics and
// /healthz). Collectors live on a registry passed in, never on package globals.
package metrics

import (
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

const namespace = "checkpointd"

// Metrics are the daemon's collectors.
type Metrics struct {
	// Saves counts settled saves by result: "ok", "duplicate" or the refusal's error code.
	Saves *prometheus.CounterVec
	// SaveSeconds is the time from taking a save off the ingest stream to publishing its result.
	SaveSeconds prometheus.Histogram
	// RawBytes and StoredBytes count the canonical and the newly stored (compressed) bytes of saves.
	RawBytes, StoredBytes prometheus.Counter
	// Requests counts service requests by operation and result code ("ok" or an error code).
	Requests *prometheus.CounterVec
	// RequestSeconds is the service time of requests by operation.
	RequestSeconds *prometheus.HistogramVec
	// Compactions counts background merges by result: ok, raced (a save came first) or error.
	Compactions *prometheus.CounterVec
	// CompactedBytes counts the stored bytes of segments written by merges.
	CompactedBytes prometheus.Counter
	// NATSEvents counts events of the daemon's own NATS connection: disconnect, reconnect,
	// slow_consumer, error (another asynchronous error) and closed.
	NATSEvents *prometheus.CounterVec
	// ReadBytesInUse is the bytes of replies being built and read loads in flight, against the
	// read budget (admission.go in internal/transfer).
	ReadBytesInUse prometheus.Gauge
}

// New creates the collectors and registers them, with the Go and process collectors, on reg.
func New(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Saves: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "saves_total",
			Help: "Saves settled, by result (ok, duplicate, or the error code of a refusal).",
		}, []string{"result"}),
		SaveSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Name: "save_duration_seconds",
			Help:    "Time to settle one save, from ingest to published result.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2.5, 14),
		}),
		RawBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "saved_raw_bytes_total",
			Help: "Canonical (uncompressed) bytes of the versions saved.",
		}),
		StoredBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "saved_stored_bytes_total",
			Help: "Compressed bytes newly written to storage by saves.",
		}),
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "requests_total",
			Help: "Service requests, by operation and result (ok or the error code).",
		}, []string{"op", "result"}),
		RequestSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Name: "request_duration_seconds",
			Help:    "Service time of requests, by operation.",
			Buckets: prometheus.ExponentialBuckets(0.00005, 2.5, 14),
		}, []string{"op"}),
		Compactions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "compactions_total",
			Help: "Background merges of stored segments, by result (ok, raced, error).",
		}, []string{"result"}),
		CompactedBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "compacted_bytes_total",
			Help: "Stored bytes of the segments written by background merges.",
		}),
		NATSEvents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "nats_events_total",
			Help: "Events of the daemon's NATS connection: disconnect, reconnect, slow_consumer, error, closed.",
		}, []string{"event"}),
		ReadBytesInUse: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace, Name: "read_bytes_in_use",
			Help: "Bytes of replies being built and of read loads in flight, against the read budget.",
		}),
	}
	for _, e := range []string{"disconnect", "reconnect", "slow_consumer", "error", "closed"} {
		m.NATSEvents.WithLabelValues(e) // present at 0, so that alerts see the series from the start
	}
	reg.MustRegister(m.NATSEvents, m.ReadBytesInUse, m.Compactions, m.CompactedBytes, m.Saves, m.SaveSeconds, m.RawBytes, m.StoredBytes, m.Requests, m.RequestSeconds,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Handler serves /metrics from gatherer and /healthz, which answers 200 "ok" while health() returns
// nil, and otherwise 503 with the reason, e.g. "unhealthy: NATS connection is down".
func Handler(gatherer prometheus.Gatherer, health func() error) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		if err := health(); err != nil {
			// One line per reason: the body is for the operator who looks after a failed probe.
			http.Error(w, "unhealthy: "+strings.ReplaceAll(err.Error(), "\n", "\nunhealthy: "), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	return mux
}
