package checkpoint_test

import (
	"context"
	"fmt"
	"log"

	"github.com/nats-io/nats.go"

	"github.com/checkpointd/checkpointd/checkpoint"
)

// Connecting to a checkpointd that serves TLS (checkpointd --tls-cert, --tls-key) and requires
// client certificates (--tls-client-ca): the client takes nats.go's own options. Credentials
// (nats.UserCredentials, nats.Nkey, user:password in the URL) are passed the same way.
func ExampleConnect_tls() {
	c, err := checkpoint.Connect("nats://checkpointd.example.com:4222", []nats.Option{
		nats.RootCAs("ca.pem"),                      // the CA that signed the server's certificate
		nats.ClientCert("client.pem", "client.key"), // for mutual TLS only
	})
	if err != nil {
		log.Fatal(err) // wrong CA, or no client certificate: ErrUnavailable, saying why
	}
	defer c.Close()
	v, err := c.Save(context.Background(), checkpoint.Key{Session: "demo"}, []byte(`[{"role":"user","content":"hi"}]`))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("saved version", v.Version)
}
