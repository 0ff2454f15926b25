package wire

import "fmt"

// OpFork starts a session from a version of another session of the same namespace without sending
// the conversation: ForkRequest → Version (the fork's version 1). The daemon stores a reference to
// the source's version (a few hundred bytes), not a copy (docs/protocol.md §5, fork).
const OpFork = "fork"

// ForkRequest forks version Version (0: the head) of the session it names into To, which must have
// no version yet. The namespace is the subject's: a fork never crosses namespaces (a To naming
// another namespace is refused). SaveID makes a retry of a fork whose reply was lost answer with
// the same version instead of a conflict; Epoch is the writer's lease epoch on To (0: none).
type ForkRequest struct {
	SessionRequest
	Version uint64     `json:"version,omitempty"`
	To      ForkTarget `json:"to"`
	SaveID  string     `json:"saveId"`
	Writer  string     `json:"writer,omitempty"`
	Epoch   uint64     `json:"epoch,omitempty"`
}

// ForkTarget is the session a fork makes. Namespace is only there to be refused when it names a
// namespace other than the request's: leaving it out means the request's namespace.
type ForkTarget struct {
	Namespace string `json:"namespace,omitempty"`
	Session   string `json:"session"`
	Agent     string `json:"agent,omitempty"` // DefaultAgent when empty
}

// Validate checks the integers and texts of a fork request (the keys are checked by the daemon
// with the namespace, as every session request's).
func (r ForkRequest) Validate() error {
	if err := checkUint("version", r.Version, MaxVersion); err != nil {
		return err
	}
	if err := checkUint("epoch", r.Epoch, MaxVersion); err != nil {
		return err
	}
	if err := ValidateID(r.SaveID); err != nil {
		return &Error{Code: CodeBadRequest, Message: fmt.Sprintf("field saveId: %v", err)}
	}
	if n := len(r.Writer); n > MaxTextHeaderBytes {
		return &Error{Code: CodeBadRequest, Message: fmt.Sprintf("field writer: %d bytes, at most %d (it is recorded in the version)", n, MaxTextHeaderBytes)}
	}
	return nil
}
