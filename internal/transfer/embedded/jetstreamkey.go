package embedded

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// StoreEncryption turns on JetStream's own encryption of the embedded server's store: every
// message block, index and stream or consumer description in the data directory is encrypted with
// keys derived from Key. The zero value leaves the store in plain text (zstd only).
type StoreEncryption struct {
	Key    string             // never logged; see ReadEncryptionKeyFile
	Cipher server.StoreCipher // server.ChaCha (nats-server's default) or server.AES
}

// Errors of a start whose key does not fit the store. Each is reported before anything in the
// data directory is changed: nats-server itself would skip the streams it cannot decrypt (and the
// daemon would then create empty ones beside them), or encrypt a plain store in place.
var (
	ErrStoreEncrypted    = errors.New("the JetStream store is encrypted, and no --encryption-key-file was given")
	ErrStoreNotEncrypted = errors.New("the JetStream store is not encrypted, and checkpointd does not encrypt an existing store in place")
	ErrWrongStoreKey     = errors.New("the --encryption-key-file key does not decrypt the JetStream store")
)

// minStoreKeyBytes keeps a typo'd or truncated key file from becoming a weak key.
const minStoreKeyBytes = 16

// ReadEncryptionKeyFile reads the store key from path: the file's content without surrounding white
// space (e.g. the output of `openssl rand -base64 32`). Errors name the file, never its content.
func ReadEncryptionKeyFile(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("--encryption-key-file: %w", err)
	}
	key := strings.TrimSpace(string(data))
	if len(key) < minStoreKeyBytes {
		return "", fmt.Errorf("--encryption-key-file %s: the key is %d bytes, at least %d are needed (e.g. openssl rand -base64 32 > %s)",
			path, len(key), minStoreKeyBytes, path)
	}
	return key, nil
}

// storeStreams lists the streams found in a JetStream store directory (dataDir/jetstream), as
// "account > stream", split by whether nats-server encrypted their description (a meta.key file
// beside it).
func storeStreams(dataDir string) (encrypted, plain []string) {
	accounts, err := os.ReadDir(filepath.Join(dataDir, server.JetStreamStoreDir))
	if err != nil {
		return nil, nil // missing: a new store; unreadable: the server's own start says why
	}
	for _, acc := range accounts {
		streams, err := os.ReadDir(filepath.Join(dataDir, server.JetStreamStoreDir, acc.Name(), "streams"))
		if err != nil {
			continue // not an account directory
		}
		for _, st := range streams {
			dir := filepath.Join(dataDir, server.JetStreamStoreDir, acc.Name(), "streams", st.Name())
			if strings.HasPrefix(st.Name(), ".") || !exists(filepath.Join(dir, server.JetStreamMetaFile)) {
				continue // a stream being deleted, or not a stream
			}
			name := acc.Name() + " > " + st.Name()
			if exists(filepath.Join(dir, server.JetStreamMetaFileKey)) {
				encrypted = append(encrypted, name)
			} else {
				plain = append(plain, name)
			}
		}
	}
	return encrypted, plain
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// checkStoreKey refuses a key that does not fit the store in dataDir, from the files alone: an
// encrypted store without a key, a plain store with one. It returns the streams the server must
// recover, for checkRecovered.
func checkStoreKey(dataDir string, enc StoreEncryption) ([]string, error) {
	encrypted, plain := storeStreams(dataDir)
	switch {
	case enc.Key == "" && len(encrypted) > 0:
		return nil, fmt.Errorf("data dir %s: %w (%d encrypted streams, e.g. %s); start with the key it was created with",
			dataDir, ErrStoreEncrypted, len(encrypted), encrypted[0])
	case enc.Key != "" && len(plain) > 0:
		return nil, fmt.Errorf("data dir %s: %w (%d plain streams, e.g. %s): start without --encryption-key-file, or start an "+
			"encrypted checkpointd on a new data dir and move the sessions there with checkpointctl migrate", dataDir, ErrStoreNotEncrypted, len(plain), plain[0])
	}
	return encrypted, nil
}

// applyStoreEncryption sets the store key on opts.
func applyStoreEncryption(opts *server.Options, enc StoreEncryption) {
	if enc.Key == "" {
		return
	}
	opts.JetStreamKey = enc.Key
	opts.JetStreamCipher = enc.Cipher
}

// checkRecovered reports the streams found on disk before the start that the running server did
// not recover: nats-server skips, with a warning only, a stream whose keys do not decrypt.
func checkRecovered(s *server.Server, dataDir string, want []string) error {
	if len(want) == 0 {
		return nil
	}
	info, err := s.Jsz(&server.JSzOptions{Accounts: true, Streams: true})
	if err != nil {
		return err
	}
	var have []string
	for _, acc := range info.AccountDetails {
		for _, st := range acc.Streams {
			have = append(have, acc.Name+" > "+st.Name)
		}
	}
	var missing []string
	for _, w := range want {
		if !slices.Contains(have, w) {
			missing = append(missing, w)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("data dir %s: %w (%d of %d streams could not be opened, e.g. %s); nothing was changed: start with the key the store was created with",
			dataDir, ErrWrongStoreKey, len(missing), len(want), missing[0])
	}
	return nil
}

// startEncrypted starts the server on a store encrypted with cfg.Encryption.Key. It starts without
// a client port first, so that no client (the daemon included) reaches a store whose streams did not
// all open, and opens the port only once every stream found on disk was recovered: a wrong key
// fails the start and leaves the data directory as it was.
func startEncrypted(opts *server.Options, cfg ServerConfig) (*server.Server, error) {
	want, err := checkStoreKey(cfg.DataDir, cfg.Encryption)
	if err != nil {
		return nil, err
	}
	applyStoreEncryption(opts, cfg.Encryption)
	opts.DontListen = true
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded nats-server: %w", err)
	}
	startErr := &startupErrors{}
	s.SetLogger(startErr, false, false)
	s.Start()
	fail := func(err error) (*server.Server, error) {
		s.Shutdown()
		s.WaitForShutdown()
		return nil, err
	}
	if err := waitReady(s, startErr, 10*time.Second); err != nil {
		return fail(fmt.Errorf("embedded nats-server (data in %s): %w", cfg.DataDir, err))
	}
	if err := checkRecovered(s, cfg.DataDir, want); err != nil {
		return fail(err)
	}
	s.AcceptLoop(make(chan struct{})) // opens the client port; returns once it listens, or failed to
	if err := startErr.first(); err != nil {
		return fail(fmt.Errorf("embedded nats-server on %s (data in %s): %w", cfg.Listen, cfg.DataDir, err))
	}
	return s, nil
}
