package logstore

// For the cluster tests (cluster_test.go), which are in package logstore_test: they start a cluster
// with internal/testenv, which imports internal/transfer, which imports this package.
var (
	FreshLog      = freshLog
	OpenFresh     = openFresh
	Connect       = connect
	OpenForTest   = open
	SaveTurns     = saveTurns
	CheckVersions = checkVersions
	StreamOf      = func(cfg LogConfig) string { return cfg.withDefaults().Stream }
)
