package logstore

import (
	"errors"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// startEmbedded runs an embedded nats-server with JetStream in dir, as the daemon runs it
// (embedded.StartServer's options for one server). The tests cannot call embedded.StartServer:
// internal/transfer imports this package since the daemon runs on the log engine.
func startEmbedded(dir string) (*server.Server, error) {
	s, err := server.NewServer(&server.Options{ServerName: "checkpointd", Host: "127.0.0.1", Port: server.RANDOM_PORT,
		JetStream: true, StoreDir: dir, NoSigs: true, NoLog: true})
	if err != nil {
		return nil, err
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		return nil, errors.New("embedded nats-server not ready after 10 s")
	}
	return s, nil
}
