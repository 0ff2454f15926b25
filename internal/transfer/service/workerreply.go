package service

import (
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// replier is what respond needs of a request: micro.Request, or a workerReply.
type replier interface {
	Subject() string
	Respond(data []byte, opts ...micro.RespondOpt) error
	Error(code, description string, data []byte, opts ...micro.RespondOpt) error
}

// workerReply answers a request from the worker goroutine it ran on, after the endpoint's handler
// returned. micro's request object must not be written then: micro reads it (whether the reply
// was an error, for its own stats) as the handler returns, and an error reply written meanwhile by
// the worker was a data race (go test -race, TestService_ErrorRepliesFromWorkers). So the worker
// publishes the message micro.Request's Respond or Error would have (the same headers and body)
// on the service's connection, to the request's reply subject, where micro would have sent it.
// micro's own error count misses these replies, as it mostly did before: the daemon's counts are
// the endpoints' stats data (resultCounts).
type workerReply struct {
	nc      *nats.Conn
	subject string // the request's subject
	reply   string // the request's reply subject
}

func newWorkerReply(nc *nats.Conn, req micro.Request) workerReply {
	return workerReply{nc: nc, subject: req.Subject(), reply: req.Reply()}
}

func (w workerReply) Subject() string { return w.subject }

// Respond sends data as the reply, as micro.Request's Respond.
func (w workerReply) Respond(data []byte, opts ...micro.RespondOpt) error {
	return w.publish(&nats.Msg{Data: data}, opts)
}

// Error sends an error reply, as micro.Request's Error: the code and description in micro's
// headers, data as the body.
func (w workerReply) Error(code, description string, data []byte, opts ...micro.RespondOpt) error {
	m := &nats.Msg{Data: data, Header: nats.Header{}}
	m.Header.Set(micro.ErrorHeader, description)
	m.Header.Set(micro.ErrorCodeHeader, code)
	return w.publish(m, opts)
}

func (w workerReply) publish(m *nats.Msg, opts []micro.RespondOpt) error {
	if w.reply == "" {
		return nats.ErrMsgNoReply // a request nobody waits for: as micro answers it
	}
	for _, opt := range opts {
		opt(m)
	}
	m.Subject = w.reply
	return w.nc.PublishMsg(m)
}
