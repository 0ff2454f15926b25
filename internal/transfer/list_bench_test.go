package transfer_test

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// cpuTime is the CPU time this process (client, daemon and embedded server alike) has used.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkList measures one listing request (the first page, a page deep in the listing, the
// admin listing of every namespace) and one history request, one at a time, against a deployment of
// CHECKPOINTD_BENCH_SESSIONS sessions (default 10000), with the CPU time each costs the process.
func BenchmarkList(b *testing.B) {
	sessions := envInt("CHECKPOINTD_BENCH_SESSIONS", 10000)
	env := testenv.Start(b)
	putHeads(b, env, wire.DefaultNamespace, sessions)
	nc := env.Conn()
	for _, c := range []struct{ name, subject, body string }{
		{"list", wire.APISubject(wire.DefaultNamespace, wire.OpList), `{}`},
		{"list-deep-page", wire.APISubject(wire.DefaultNamespace, wire.OpList), fmt.Sprintf(`{"offset":%d}`, sessions*3/4)},
		{"admin-list", wire.AdminListSubject, `{}`},
		{"history", wire.APISubject(wire.DefaultNamespace, wire.OpHistory), `{"session":"flood-000042"}`},
	} {
		b.Run(fmt.Sprintf("%s/sessions=%d", c.name, sessions), func(b *testing.B) {
			cpu := cpuTime(b)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				m, err := nc.Request(c.subject, []byte(c.body), 30*time.Second)
				if err != nil {
					b.Fatal(err)
				}
				if m.Header.Get(wire.HdrServiceErrorCode) != "" {
					b.Fatalf("%s: %s", c.name, m.Data)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64((cpuTime(b)-cpu).Microseconds())/float64(b.N), "cpu-µs/op")
		})
	}
}
