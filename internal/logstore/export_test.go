package logstore

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
)
