// Package metrics owns checkpointd's Prometheus collectors and its HTTP endpoints (/metrics and
// /healthz). Collectors live on a registry passed in, never on package globals.
package metrics

import (
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/checkpointd/checkpointd/internal/buildinfo"
)

const namespace = "checkpointd"

// Metrics are the daemon's collectors.
type Metrics struct {
	// Saves counts settled saves by path (SavePathRequest or SavePathIngest) and result: "ok",
	// "duplicate" or the refusal's error code.
	Saves *prometheus.CounterVec
	// SaveSeconds is the time to settle one save: from taking it off the ingest stream to
	// publishing its result, or from receiving its request to answering it.
	SaveSeconds prometheus.Histogram
	// RawBytes and StoredBytes count the canonical and the newly stored (compressed) bytes of saves.
	RawBytes, StoredBytes prometheus.Counter
	// Requests counts service requests by operation and result code ("ok" or an error code).
	Requests *prometheus.CounterVec
	// RequestSeconds is the service time of requests by operation.
	RequestSeconds *prometheus.HistogramVec
	// Compactions counts the packer's packs (a session's entries since its last pack joined into
	// one, docs/format.md §8.7) by result: ok, raced (nothing packed: a save or another daemon came
	// first, or nothing was due any more) or error.
	Compactions *prometheus.CounterVec
	// CompactedBytes counts the bytes the packs wrote.
	CompactedBytes prometheus.Counter
	// RequestSaves is the saves per save request: 1 for a single save, k for a group of k
	// (docs/protocol.md §4.0.1). Its mean says how much group commit is joining.
	RequestSaves prometheus.Histogram
	// NATSEvents counts events of the daemon's own NATS connection: disconnect, reconnect,
	// slow_consumer, error (another asynchronous error) and closed.
	NATSEvents *prometheus.CounterVec
	// ReadBytesInUse is the bytes of replies being built and read loads in flight, against the
	// read budget (internal/transfer/admission).
	ReadBytesInUse prometheus.Gauge
	// ReceivedBytes counts the bytes of saves received: the bodies of save requests, and of save
	// messages taken off the ingest stream, and their chunks, as sent (compressed if the client
	// compressed).
	ReceivedBytes prometheus.Counter
	// RetentionRounds counts housekeeping rounds (retention and sweeps) by result: ok or error (at
	// least one step failed; the next round tries again).
	RetentionRounds *prometheus.CounterVec
	// RetentionSeconds is how long one housekeeping round took.
	RetentionSeconds prometheus.Histogram
	// RetentionRemoved counts what housekeeping removed, by kind: version (by the retention
	// policy), value (no session uses it).
	RetentionRemoved *prometheus.CounterVec

	// LeaseTakeovers counts leases acquired from another owner, by kind: expired (theirs had run
	// out) or forced (taken while it held). The old owner's next write is refused fenced.
	LeaseTakeovers *prometheus.CounterVec

	reg prometheus.Registerer
}

// Register adds a collector (the daemon's scrape-time state, state.go in internal/transfer) to the
// registry the metrics were created on.
func (m *Metrics) Register(c prometheus.Collector) error { return m.reg.Register(c) }

// SaveResults are the results saves_total is created with at 0, so that a rate of refusals of each
// kind is defined before the first one (the wire error codes a save can end with).
var SaveResults = []string{"ok", "duplicate", "invalid", "too_large", "unknown_format", "conflict", "leased",
	"fenced", "moved", "corrupt", "busy", "bad_request", "unavailable", "internal"}

// The paths a save takes to the daemon (saves_total's path label): a core NATS request answered
// when the save is durable (docs/protocol.md §4.0), or the ingest stream, the fallback (§4.1).
const (
	SavePathRequest = "request"
	SavePathIngest  = "ingest"
)

// New creates the collectors and registers them, with the Go and process collectors, on reg.
func New(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Saves: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "saves_total",
			Help: "Saves settled, by path (request, or ingest: the fallback stream) and result (ok, duplicate, or the error code of a refusal).",
		}, []string{"path", "result"}),
		SaveSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Name: "save_duration_seconds",
			Help:    "Time to settle one save, from ingest to published result, or from request to reply.",
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
			Help: "Packs of a session's entries since its last pack, run after saves, by result (ok, raced: nothing packed, error).",
		}, []string{"result"}),
		CompactedBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "compacted_bytes_total",
			Help: "Bytes written by packs.",
		}),
		RequestSaves: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Name: "save_request_saves",
			Help:    "Saves per save request: 1 for a single save, k for a group of k (group commit).",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64},
		}),
		NATSEvents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "nats_events_total",
			Help: "Events of the daemon's NATS connection: disconnect, reconnect, slow_consumer, error, closed.",
		}, []string{"event"}),
		ReadBytesInUse: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace, Name: "read_in_use_bytes",
			Help: "Bytes of replies being built and of read loads in flight, against the read budget.",
		}),
		ReceivedBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "ingest_received_bytes_total",
			Help: "Bytes of saves received (request and ingest message bodies, chunks), as sent.",
		}),
		RetentionRounds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "retention_rounds_total",
			Help: "Housekeeping rounds (retention policy and sweeps), by result (ok, error).",
		}, []string{"result"}),
		RetentionSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Name: "retention_round_duration_seconds",
			Help:    "Time one housekeeping round took.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}),
		RetentionRemoved: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "retention_removed_total",
			Help: "What housekeeping removed, by kind (version, value).",
		}, []string{"kind"}),
		LeaseTakeovers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "lease_takeovers_total",
			Help: "Leases acquired from another owner, by kind (expired, forced).",
		}, []string{"kind"}),
		reg: reg,
	}
	for _, k := range []string{"expired", "forced"} {
		m.LeaseTakeovers.WithLabelValues(k)
	}
	for _, p := range []string{SavePathRequest, SavePathIngest} {
		for _, r := range SaveResults {
			m.Saves.WithLabelValues(p, r)
		}
	}
	for _, r := range []string{"ok", "error"} {
		m.RetentionRounds.WithLabelValues(r)
	}
	for _, r := range []string{"ok", "raced", "error"} {
		m.Compactions.WithLabelValues(r)
	}
	for _, k := range []string{"version", "value"} {
		m.RetentionRemoved.WithLabelValues(k)
	}
	for _, e := range []string{"disconnect", "reconnect", "slow_consumer", "error", "closed"} {
		m.NATSEvents.WithLabelValues(e) // present at 0, so that alerts see the series from the start
	}
	reg.MustRegister(m.NATSEvents, m.ReadBytesInUse, m.Compactions, m.CompactedBytes, m.Saves, m.SaveSeconds, m.RequestSaves, m.RawBytes, m.StoredBytes, m.Requests, m.RequestSeconds,
		buildInfo(), m.LeaseTakeovers, m.ReceivedBytes, m.RetentionRounds, m.RetentionSeconds, m.RetentionRemoved, processIO{},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// buildInfo is checkpointd_build_info: always 1, its labels say which checkpointd this is (module
// version, VCS commit, Go version, protocol and storage format versions), the facts `checkpointd
// --version` prints.
func buildInfo() prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: namespace, Name: "build_info",
		Help:        "Always 1; the labels say which checkpointd is running (version, commit, Go, protocol and storage formats).",
		ConstLabels: prometheus.Labels(buildinfo.Get().Metadata()),
	})
	g.Set(1)
	return g
}

// Handler serves /metrics from gatherer, /healthz and /readyz. /healthz answers 200 "ok" while
// health() returns nil, and otherwise 503 with the reason, e.g. "unhealthy: NATS connection is
// down"; /readyz does the same with ready() ("not ready: ..."), which asks more: that the daemon has
// also caught up with the saves queued.
func Handler(gatherer prometheus.Gatherer, health, ready func() error) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", probe(health, "unhealthy: "))
	mux.HandleFunc("GET /readyz", probe(ready, "not ready: "))
	return mux
}

// probe answers 200 "ok" while check returns nil, else 503 with one line per reason (the body is
// for the operator who looks after a failed probe).
func probe(check func() error, prefix string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		if err := check(); err != nil {
			http.Error(w, prefix+strings.ReplaceAll(err.Error(), "\n", "\n"+prefix), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	}
}
