package wire

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ProtocolVersion is reported by the service and bumped on any incompatible change of this package.
const ProtocolVersion = "1"

// Subjects. Every subject a client publishes or requests on carries the encoded namespace as its third
// token, so an operator can grant a client "cp.*.<namespace>.>" and nothing else.
const (
	SubjectRoot = "cp"
	ingestPfx   = "cp.ingest."
	savePfx     = "cp.save."
	chunkPfx    = "cp.chunk."
	resultPfx   = "cp.result."
	savedPfx    = "cp.saved."
	apiPfx      = "cp.api."
)

// IngestSubject is where a save for key is published (JetStream stream CP_INGEST).
func IngestSubject(k Key) string { return ingestPfx + k.Token() }

// SaveSubject is where a save for key is sent as a core NATS request to a daemon, which answers
// once the save is durable with its SaveResult (docs/protocol.md §4.0). IngestSubject is the
// fallback when no daemon answers.
func SaveSubject(k Key) string { return savePfx + k.Token() }

// SaveSubjectPrefix is the prefix of SaveSubject; IngestSubjectPrefix that of IngestSubject; the
// others those of ChunkSubject, ResultSubject, SavedSubject, APISubject and AdminListSubject. The
// wildcards the daemon subscribes to, its streams capture and the tenants' accounts grant are made
// from them (EverySubject, NamespaceSubjects), never written by hand.
const (
	SaveSubjectPrefix   = savePfx
	IngestSubjectPrefix = ingestPfx
	ChunkSubjectPrefix  = chunkPfx
	ResultSubjectPrefix = resultPfx
	SavedSubjectPrefix  = savedPfx
	APISubjectPrefix    = apiPfx
	AdminSubjectPrefix  = "cp.admin."
)

// EverySubject is the wildcard of every subject under prefix (one of the prefixes above), of every
// namespace: EverySubject(IngestSubjectPrefix) is "cp.ingest.>".
func EverySubject(prefix string) string { return prefix + ">" }

// NamespaceSubjects is the wildcard of every subject under prefix in one namespace, given as its
// token (EncodeID of the namespace): NamespaceSubjects(IngestSubjectPrefix, "default") is
// "cp.ingest.default.>".
func NamespaceSubjects(prefix, namespaceToken string) string { return prefix + namespaceToken + ".>" }

// APIOpSubjects is the wildcard of one service operation in every namespace: "cp.api.*.<op>".
func APIOpSubjects(op string) string { return apiPfx + "*." + op }

// ChunkSubject carries the pieces of a save too large for one message (stream CP_CHUNKS).
func ChunkSubject(namespace, saveID string) string {
	return chunkPfx + EncodeID(namespace) + "." + EncodeID(saveID)
}

// ResultSubject is where the daemon publishes the outcome of a save (stream CP_RESULTS).
func ResultSubject(namespace, saveID string) string {
	return resultPfx + EncodeID(namespace) + "." + EncodeID(saveID)
}

// SavedSubject is where the daemon announces the outcome of a save sent as a request
// (docs/protocol.md §4.3): core NATS only, no stream captures it, so nothing is written to disk.
// The writer has the outcome in its reply, and a retry of the request is de-duplicated by save id;
// watchers subscribe to it next to ResultSubject.
func SavedSubject(namespace, saveID string) string {
	return savedPfx + EncodeID(namespace) + "." + EncodeID(saveID)
}

// ResultDirectGetPrefix, followed by a result subject, is the JetStream direct get of the last
// result stored on that subject (docs/protocol.md §4.3): a plain request, no stream info needed.
const ResultDirectGetPrefix = "$JS.API.DIRECT.GET." + StreamResults + "."

// UnattributedResultSubject is where the refusal of a save goes when it names no usable session or
// save id (a malformed ingest subject, a missing or invalid Cp-Save-Id): the third token of the
// subject it was published on, as published, and its CP_INGEST stream sequence from the PubAck.
// Save ids are single tokens, so this five-token subject is never a save's own result subject.
func UnattributedResultSubject(namespaceToken string, seq uint64) string {
	return resultPfx + namespaceToken + ".seq." + strconv.FormatUint(seq, 10)
}

// APISubject is the request subject of one service operation in a namespace.
func APISubject(namespace, op string) string { return apiPfx + EncodeID(namespace) + "." + op }

// Service operations (the last token of an API subject).
const (
	OpList    = "list"    // ListRequest → ListReply: the heads of the namespace's sessions
	OpHistory = "history" // HistoryRequest → HistoryReply: the versions of one session, in pages
	OpGet     = "get"     // GetRequest → Version: one version's record (head when Version is 0)
	OpRead    = "read"    // ReadRequest → bytes of the conversation, in pieces
	OpPrune   = "prune"   // PruneRequest → PruneReply: remove old versions by a retention policy
	OpLease   = "lease"   // LeaseRequest → Lease: acquire, renew, release or inspect a session's lease
	OpSeal    = "seal"    // SealRequest → Version: mark a session moved; it refuses writes from then on
	OpDelete  = "delete"  // DeleteRequest → Version (the deleted head): remove a session entirely
)

// AdminListSubject lists sessions of every namespace; it is for operators, so it carries no namespace.
const AdminListSubject = AdminSubjectPrefix + "list"

// Stream and bucket names.
const (
	StreamIngest  = "CP_INGEST"
	StreamChunks  = "CP_CHUNKS"
	StreamResults = "CP_RESULTS"
	BucketHeads   = "cp_heads"
	BucketVersion = "cp_versions"
	BucketLayouts = "cp_layouts"
	BucketSegment = "cp_segments"
	BucketValues  = "cp_values"
	ServiceName   = "checkpointd"
)

// Headers of a save message on an ingest subject.
const (
	HdrMsgID           = "Nats-Msg-Id" // JetStream de-duplication; set it to the save id
	HdrSaveID          = "Cp-Save-Id"
	HdrExpectedVersion = "Cp-Expected-Version"
	HdrWriter          = "Cp-Writer"
	HdrReason          = "Cp-Reason"
	HdrFormat          = "Cp-Format"
	HdrEncoding        = "Cp-Encoding"
	HdrBaseVersion     = "Cp-Base-Version" // on a save: the body holds only the messages appended to this version
	HdrForkOf          = "Cp-Fork-Of"      // on a save: the session is a fork of this version (ForkRef.String)
	HdrChunks          = "Cp-Chunks"       // on a save: its body is in this many messages on ChunkSubject
	HdrChunk           = "Cp-Chunk"        // on a chunk: its index, from 0
	HdrEpoch           = "Cp-Epoch"        // on a save: the writer's lease epoch (OpLease)
	HdrDialect         = "Cp-Dialect"      // on a save: the conversation's shape (docs/format.md, "Dialects"); default native
	// Set by migrate and import to copy a version from elsewhere as it was (see ImportedVersion).
	HdrImportVersion = "Cp-Import-Version" // the version number to store it as
	HdrImportCreated = "Cp-Import-Created" // its creation time, RFC 3339 with nanoseconds
	HdrImportSource  = "Cp-Import-Source"  // where it came from: a server URL or a bundle file name
	HdrImportVia     = "Cp-Import-Via"     // ReasonMigrate or ReasonImport
	// Reply headers of OpRead.
	HdrTotal  = "Cp-Total"
	HdrOffset = "Cp-Offset"
	HdrHash   = "Cp-Hash" // "sha256:<hex>" of the whole reply body (all pieces), decoded: the version's hash for the full view; on an import, the hash the version must have
	// HdrRawTotal, on a read served as zstd: the length of the body once decoded (what Cp-Total is
	// for identity), so that a client bounds its decoding.
	HdrRawTotal = "Cp-Raw-Total"
	// HdrVersion, on the first piece (offset 0) of a read of one version: that version's record
	// (§6) as `get` returns it, in JSON written in ASCII only (every other character escaped \uXXXX),
	// at most MaxVersionHeaderBytes; a read of the head (version 0) learns here which version it got.
	HdrVersion = "Cp-Version"
	// Set by the service on error replies (nats.go micro convention).
	HdrServiceErrorCode = "Nats-Service-Error-Code"
	HdrServiceError     = "Nats-Service-Error"
)

// MaxTextHeaderBytes bounds the free-text headers of a save that the version record keeps as
// sent (Cp-Writer, Cp-Import-Source): each is stored in every version and head, so a client
// must not make them as large as a message.
const MaxTextHeaderBytes = 1024

// MaxVersionHeaderBytes bounds HdrVersion. A record's free text is bounded (seven ids of at most
// MaxIDBytes, a writer and an import source of at most MaxTextHeaderBytes: 3840 bytes), and no
// byte of it takes more than 6 escaped (\u007f; a 4-byte character takes 12), so a record's header
// is under 24 KiB; a daemon leaves out a longer one.
const MaxVersionHeaderBytes = 32 << 10

// Encodings of a save body or of a read reply (identity or zstd).
const (
	EncodingIdentity = "identity"
	EncodingZstd     = "zstd"
)

// Reasons a version was written.
const (
	ReasonTurn    = "turn"
	ReasonPause   = "pause"
	ReasonMigrate = "migrate"
	ReasonImport  = "import"
	ReasonManual  = "manual"
	ReasonFork    = "fork"
)

// ValidReason reports whether r is one of the known reasons.
func ValidReason(r string) bool {
	switch r {
	case ReasonTurn, ReasonPause, ReasonMigrate, ReasonImport, ReasonManual, ReasonFork:
		return true
	}
	return false
}

// VersionFormat is the format of a version record this code writes. Format 1 (whole-conversation
// blobs) was replaced before any release and is refused.
const VersionFormat = 2

// Version is the immutable record of one checkpoint version, as stored and as served.
type Version struct {
	Format      int       `json:"format"`
	Key         Key       `json:"key"`
	Version     uint64    `json:"version"`
	Parent      uint64    `json:"parent"` // 0 for the first version
	Hash        string    `json:"hash"`   // "sha256:<hex>" of the conversation's canonical bytes
	SaveID      string    `json:"saveId"`
	Writer      string    `json:"writer,omitempty"`
	Reason      string    `json:"reason"`
	Created     time.Time `json:"created"`
	RawBytes    int64     `json:"rawBytes"`    // canonical JSON size
	StoredBytes int64     `json:"storedBytes"` // compressed bytes this save added to storage (its new messages)
	Counts      Counts    `json:"counts"`
	Gen         uint64    `json:"gen"`              // the storage generation holding its messages (docs/format.md)
	ForkOf      *ForkRef  `json:"forkOf,omitempty"` // on the first version of a fork: where it came from
	Origin      *Origin   `json:"origin,omitempty"` // on a version copied in by migrate or import
	// Dialect is the conversation's shape (docs/format.md, "Dialects"); "" for native, so records
	// written before dialects existed read as native and native records are unchanged.
	Dialect string `json:"dialect,omitempty"`
	// Unverified is no part of the record (never stored, sent or decoded): the Go SDK sets it on
	// the Version a save returns when that save was a duplicate (its save id had made this
	// version) which could not be compared with it, to the sentence saying why (the result's
	// unverified, docs/protocol.md §4.3): its chunks were removed, or the base of its append was
	// removed by retention. Empty when the daemon compared the repeat whole, or the SDK did (a
	// Save of a whole array whose hash is the version's).
	Unverified string `json:"-"`
}

// Origin records that a version was copied from another deployment (Via "migrate") or from a
// bundle file (Via "import"); its number, hash, writer, reason and creation time are the original's.
type Origin struct {
	Via    string    `json:"via"`
	Source string    `json:"source,omitempty"`
	At     time.Time `json:"at,omitzero"` // absent if unknown: never a zero time
}

// Lease is who may write a session. Epoch grows by one with every acquisition, and a save that
// carries an epoch (HdrEpoch) is refused unless it is the current one: after a takeover, a late
// write of the old owner is fenced off. Owner is empty once the lease is released. A lease past
// Expires may be taken over; until somebody does, its owner's epoch stays current.
type Lease struct {
	Key      Key       `json:"key"`
	Epoch    uint64    `json:"epoch"`
	Owner    string    `json:"owner,omitempty"`
	Acquired time.Time `json:"acquired,omitzero"` // absent (with expires) when never leased
	Expires  time.Time `json:"expires,omitzero"`
	Head     uint64    `json:"head"` // the session's head version when the reply was made (0: none yet)
}

// Held reports whether the lease has an owner that has not let it expire at now.
func (l Lease) Held(now time.Time) bool { return l.Owner != "" && now.Before(l.Expires) }

// Moved marks a session migrated elsewhere: it refuses writes and points to its new home.
type Moved struct {
	To string    `json:"to"`
	At time.Time `json:"at,omitzero"`
}

// Lease operations.
const (
	LeaseAcquire = "acquire"
	LeaseRenew   = "renew"
	LeaseRelease = "release"
	LeaseStatus  = "status" // read the lease; changes nothing
)

// LeaseRequest is one lease operation on a session. Acquire needs Owner and TTLMillis and returns
// the new epoch; it is refused (CodeLeased) while another owner holds an unexpired lease, unless
// Force. Renew and Release need the current Epoch (else CodeFenced).
type LeaseRequest struct {
	SessionRequest
	Op        string `json:"op"`
	Owner     string `json:"owner,omitempty"`
	TTLMillis int64  `json:"ttlMillis,omitempty"`
	Epoch     uint64 `json:"epoch,omitempty"`
	Force     bool   `json:"force,omitempty"`
}

// SealRequest marks a session moved to MovedTo, provided its head is still version Expected.
type SealRequest struct {
	SessionRequest
	Expected uint64 `json:"expected"`
	MovedTo  string `json:"movedTo"`
}

// DeleteRequest removes a session (head, versions and stored messages), provided its head is still
// version Expected when that is set.
type DeleteRequest struct {
	SessionRequest
	Expected *uint64 `json:"expected,omitempty"`
}

// SessionHead is one session in a listing: its head version, its lease and whether it moved.
type SessionHead struct {
	Version
	Lease *Lease `json:"lease,omitempty"`
	Moved *Moved `json:"moved,omitempty"`
}

// ForkRef names the version a session was forked from.
type ForkRef struct {
	Key     Key    `json:"key"`
	Version uint64 `json:"version"`
}

// String is the header form of a fork reference: the key token, a dot, the version.
func (f ForkRef) String() string { return f.Key.Token() + "." + strconv.FormatUint(f.Version, 10) }

// ParseForkRef is the inverse of ForkRef.String.
func ParseForkRef(s string) (ForkRef, error) {
	i := strings.LastIndexByte(s, '.')
	if i < 0 {
		return ForkRef{}, fmt.Errorf("%w: fork reference %q has no version", ErrInvalidID, s)
	}
	n, err := strconv.ParseUint(s[i+1:], 10, 64)
	if err != nil || n == 0 || n > MaxVersion || strconv.FormatUint(n, 10) != s[i+1:] { // "007", "+7": not as String writes it
		return ForkRef{}, fmt.Errorf("%w: fork reference %q: the version is not a plain decimal integer in 1..%d", ErrInvalidID, s, MaxVersion)
	}
	k, err := ParseToken(s[:i])
	return ForkRef{Key: k, Version: n}, err
}

// Counts are the message counts of a version.
type Counts struct {
	Messages   int `json:"messages"`
	User       int `json:"user"`
	Assistant  int `json:"assistant"`
	ToolResult int `json:"toolResult"`
	Extension  int `json:"extension"`
	ToolCalls  int `json:"toolCalls"`
	System     int `json:"system,omitempty"` // system and developer messages (dialects that have them)
}

// SessionRequest names one session of the namespace in the subject.
type SessionRequest struct {
	Session string `json:"session"`
	Agent   string `json:"agent,omitempty"` // DefaultAgent when empty
}

// GetRequest asks for one version's record; Version 0 means the head.
type GetRequest struct {
	SessionRequest
	Version uint64 `json:"version,omitempty"`
}

// ReadRequest asks for the conversation bytes of one version from Offset on. The reply body holds at
// most one message's worth; HdrTotal gives the full length, so a client asks again from Offset+len
// until it has Total bytes. Version 0 reads the head, only from Offset 0: the first piece's HdrVersion
// names the version, which the later pieces ask for, so pieces never mix versions.
type ReadRequest struct {
	SessionRequest
	Version  uint64 `json:"version"`
	Offset   int64  `json:"offset,omitempty"`
	Encoding string `json:"encoding,omitempty"` // EncodingIdentity (default) or EncodingZstd
	// View selects messages: ViewFull (default) or ViewRequest (from the last compaction marker on).
	View string `json:"view,omitempty"`
	// MaxMessages, when positive, keeps the most recent messages (rounded down to even, never
	// starting on a tool result).
	MaxMessages int `json:"maxMessages,omitempty"`
	// Merge, when set, reads the merged view of the session's agents instead of one version: the
	// version of each agent to merge (take them from OpList). Agent and Version are then ignored.
	Merge map[string]uint64 `json:"merge,omitempty"`
	// AgentPrefix, with Merge, prefixes each message's first text with "[agentId] ".
	AgentPrefix bool `json:"agentPrefix,omitempty"`
}

// The views a read may ask for (docs/protocol.md §5).
const (
	ViewFull    = "full"    // every message (the default)
	ViewRequest = "request" // from the last compaction marker on, the marker included
)

// PruneRequest removes the versions a retention policy does not keep, from one session or (Session
// empty) every session of the namespace. The head is always kept. Unset limits fall back to the
// daemon's policy for the namespace.
type PruneRequest struct {
	Session       string `json:"session,omitempty"`
	Agent         string `json:"agent,omitempty"`
	KeepLast      int    `json:"keepLast,omitempty"`      // keep at least the newest N versions
	MaxAgeSeconds int64  `json:"maxAgeSeconds,omitempty"` // keep versions younger than this
	DryRun        bool   `json:"dryRun,omitempty"`        // report, remove nothing
}

// PruneReply says what was (or, in a dry run, would be) removed, per session.
type PruneReply struct {
	Sessions []PruneResult `json:"sessions"`
}

// PruneResult is one session's prune.
type PruneResult struct {
	Key      Key      `json:"key"`
	Versions []uint64 `json:"versions"` // removed (or to be removed)
	Kept     int      `json:"kept"`
	Segments int      `json:"segments"` // stored segments freed
}

// ListRequest filters OpList. A reply holds a page of sessions; when More is set, ask again with
// Cursor set to the reply's Cursor. Offset is no longer served (the daemon refuses a positive one,
// naming cursor): pages follow the order sessions were created in, and a cursor is where one ends.
type ListRequest struct {
	Session string `json:"session,omitempty"` // only this session's agents, when set
	Cursor  string `json:"cursor,omitempty"`  // opaque: the Cursor of the previous reply ("": the first page)
	Offset  int    `json:"offset,omitempty"`  // refused when positive (protocol before the log engine)
	Limit   int    `json:"limit,omitempty"`   // at most this many sessions, 1..MaxListLimit (0: as many as fit)
}

// MaxListLimit is the largest page a list request may ask for: four times what a reply holds at
// the default 1 MiB max_payload (about 2,400 heads, so there the reply's size bounds a page), and
// a bound on the index reads one request may cost on a server with a larger max_payload.
const MaxListLimit = 10_000

// ListReply holds the head of each session, in the order the sessions were created (namespace by
// namespace, sorted, on the admin subject). Cursor is set when More is.
type ListReply struct {
	Sessions []SessionHead `json:"sessions"`
	More     bool          `json:"more,omitempty"`
	Cursor   string        `json:"cursor,omitempty"`
}

// HistoryRequest asks for the versions of a session: oldest first after version After (0: from the
// first), or, with NewestFirst, newest first from the head (or from Cursor, the previous reply's).
type HistoryRequest struct {
	SessionRequest
	After       uint64 `json:"after,omitempty"`
	NewestFirst bool   `json:"newestFirst,omitempty"`
	Cursor      string `json:"cursor,omitempty"` // NewestFirst only: opaque, the previous reply's
	Limit       int    `json:"limit,omitempty"`  // NewestFirst only: at most this many versions (0: as many as fit)
}

// HistoryReply holds versions of a session, as many as fit in one message: oldest first, or newest
// first if asked. When More is set, ask again with After set to the last version received (oldest
// first), or with Cursor (newest first).
type HistoryReply struct {
	Versions []Version `json:"versions"`
	More     bool      `json:"more,omitempty"`
	Cursor   string    `json:"cursor,omitempty"`
}

// SaveResult is published on ResultSubject once a save is settled, accepted or refused.
type SaveResult struct {
	SaveID    string   `json:"saveId"`
	Key       Key      `json:"key"`
	OK        bool     `json:"ok"`
	Duplicate bool     `json:"duplicate,omitempty"` // the save id was already stored; Version is that version
	Version   *Version `json:"version,omitempty"`
	Error     *Error   `json:"error,omitempty"`
	// Received is Hash of the save's body as the daemon read it (after zstd decoding and joining
	// its chunks): the writer compares it with the hash of what it sent. Set whenever the body was
	// read; absent on refusals decided from the headers alone, and on a duplicate whose chunks are
	// gone.
	Received string `json:"received,omitempty"`
	// Unverified, on a duplicate, says why the daemon could not compare this save with the
	// version its save id made (its chunks were removed when that version was stored; the base
	// version of an append was removed by retention): the client checks what it can
	// (docs/protocol.md §4.3). Absent when the save was compared whole.
	Unverified string `json:"unverified,omitempty"`
	// Seq is the CP_INGEST stream sequence of a save that could not be attributed (see
	// UnattributedResultSubject).
	Seq uint64 `json:"seq,omitempty"`
}

// Error codes: the stable, machine-readable part of every refusal.
const (
	CodeBadRequest    = "bad_request"    // the request itself is unusable (bad id, bad header)
	CodeInvalid       = "invalid"        // the conversation failed validation
	CodeNotFound      = "not_found"      // no such session or version
	CodeConflict      = "conflict"       // the expected version is not the head
	CodeTooLarge      = "too_large"      // the checkpoint is over the daemon's limit
	CodeUnknownFormat = "unknown_format" // a format version this daemon does not know
	CodeUnavailable   = "unavailable"    // try again: storage unavailable or ingest still catching up
	CodeLeased        = "leased"         // another owner holds the session's lease (Owner, Epoch say who)
	CodeFenced        = "fenced"         // the epoch sent is not the current one: the lease was taken over or released
	CodeMoved         = "moved"          // the session was migrated away (MovedTo says where) and refuses writes
	CodeCorrupt       = "corrupt"        // stored bytes do not match their hash, or a stored piece is missing
	CodeBusy          = "busy"           // the daemon is at one of its limits (reads in flight, bytes of saves in progress); retry after RetryAfterMillis
	CodeSaveIDReused  = "save_id_reused" // the save id already made a version (Version) of another conversation: nothing was stored
	CodeInternal      = "internal"
)

// Error is the body of every refusal (service error replies and failed save results).
type Error struct {
	Code    string  `json:"code"`
	Message string  `json:"message"`
	Index   *int    `json:"index,omitempty"`  // message index, for invalid conversations
	Field   string  `json:"field,omitempty"`  // field path inside the message
	Offset  *int64  `json:"offset,omitempty"` // byte offset, for syntax errors
	Head    *uint64 `json:"head,omitempty"`   // the current head version, for conflicts
	Owner   string  `json:"owner,omitempty"`  // the lease's owner, for leased and fenced
	Epoch   *uint64 `json:"epoch,omitempty"`  // the lease's current epoch, for leased and fenced
	MovedTo string  `json:"movedTo,omitempty"`
	// Version, for save_id_reused: the version the save id made (with another conversation).
	Version *uint64 `json:"version,omitempty"`
	// RetryAfterMillis, for busy (and sometimes unavailable): how long to wait before trying again.
	RetryAfterMillis *int64 `json:"retryAfterMs,omitempty"`
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// StatusCode is the numeric code put in the Nats-Service-Error-Code header (HTTP-like).
func StatusCode(code string) string {
	n := map[string]int{
		CodeBadRequest: 400, CodeNotFound: 404, CodeConflict: 409, CodeFenced: 409, CodeSaveIDReused: 409, CodeMoved: 410,
		CodeTooLarge: 413, CodeUnknownFormat: 415, CodeInvalid: 422, CodeLeased: 423, CodeBusy: 429, CodeUnavailable: 503,
	}[code]
	if n == 0 {
		n = 500
	}
	return strconv.Itoa(n)
}

// MaxVersion is the largest version number (and lease epoch) checkpointd assigns or accepts: 2^53-1,
// the largest integer every JSON client (JavaScript included) holds exactly. A session whose head
// reaches it refuses further saves rather than wrapping.
const MaxVersion uint64 = 1<<53 - 1

// Hash is how the protocol names content: "sha256:" and the lower-case hex SHA-256 of data.
func Hash(data []byte) string {
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// hashBesideBytes is the size from which HashBeside hashes on a goroutine of its own: below it,
// the hash (SHA-256 at 1-2 GB/s: 32 µs or less) costs less than handing it over.
const hashBesideBytes = 64 << 10

// HashBeside starts computing Hash(data) and returns a function that waits for it, so that a
// large body is hashed while other work on it goes on (the daemon's save, the SDK's compression
// and send). data must not change until the function has returned; reading it meanwhile is fine.
func HashBeside(data []byte) func() string {
	if len(data) < hashBesideBytes {
		h := Hash(data)
		return func() string { return h }
	}
	done := make(chan string, 1)
	go func() { done <- Hash(data) }()
	var h string
	var once sync.Once
	return func() string {
		once.Do(func() { h = <-done })
		return h
	}
}
