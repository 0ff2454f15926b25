//go:build !race

package engine

// raceEnabled: see race_on_internal_test.go.
const raceEnabled = false
