package logstore

import "time"

// For the tests in package logstore_test (cluster_test.go, engine_test.go, the benchmarks): they
// start a cluster with internal/testenv, which imports internal/transfer, which imports this package.
var (
	FreshLog      = freshLog
	OpenFresh     = openFresh
	Connect       = connect
	StreamOf      = func(cfg LogConfig) string { return cfg.withDefaults().Stream }
	StartEmbedded = startEmbedded
	StartProcess  = startProcess
	OldNATS       = oldNATS
	ServerAtLeast = serverAtLeast
	SuiteOptions  = suiteOptions
)

// SetBeforeFirstEntry makes every creation through l run f between its index entry and its first
// entry (an error f returns fails the first entry without sending it).
func SetBeforeFirstEntry(l *Log, f func() error) { l.beforeFirstEntry = f }

// SetIndexGrace sets l's creationGrace (how young an index entry a Purge leaves alone).
func SetIndexGrace(l *Log, d time.Duration) { l.indexGrace = d }

// ErrStoreFull is a refusal as JetStream words a full store (10077), for creations failed on
// purpose: the server did not store the entry.
var ErrStoreFull error = &apiError{Code: 400, ErrCode: 10077, Description: "maximum bytes exceeded"}

// SetBeforeUnlistDelete makes a refused creation through l on an empty log run f between its read
// of the log's first entry and the delete of its index entry.
func SetBeforeUnlistDelete(l *Log, f func()) { l.beforeUnlistDelete = f }
