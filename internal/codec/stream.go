package codec

import (
	"io"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// Streaming forms of the blob and zstd functions, for conversations too large to hold twice: a
// blob is written or read piece by piece, and decoded bytes land directly in the caller's buffer.

// streamEncoders are zstd stream encoders for reuse (each holds its window and tables).
var streamEncoders sync.Pool

// blobWriter writes a blob: the header, then raw bytes compressed as they come.
type blobWriter struct {
	enc *zstd.Encoder
}

// NewBlobWriter returns a writer that frames what is written to it as a stored blob on w (the same
// bytes EncodeBlob would produce, up to zstd's block choices). Close finishes the blob; it does not
// close w.
func NewBlobWriter(w io.Writer) (io.WriteCloser, error) {
	header := [HeaderSize]byte{}
	copy(header[:], magic[:])
	header[4], header[5] = FormatVersion, compressionZstd
	if _, err := w.Write(header[:]); err != nil {
		return nil, err
	}
	enc, _ := streamEncoders.Get().(*zstd.Encoder)
	if enc == nil {
		var err error
		if enc, err = zstd.NewWriter(w, encoderOptions...); err != nil {
			return nil, err
		}
	} else {
		enc.Reset(w)
	}
	return &blobWriter{enc: enc}, nil
}

func (b *blobWriter) Write(p []byte) (int, error) { return b.enc.Write(p) }

func (b *blobWriter) Close() error {
	err := b.enc.Close()
	b.enc.Reset(nil)
	streamEncoders.Put(b.enc)
	return err
}

// AppendBlob decodes the blob read from r and appends its raw bytes to dst, refusing to produce
// more than maxSize bytes. With enough room in dst (cap), nothing else of that size is allocated:
// neither the blob nor a decoded copy.
func AppendBlob(dst []byte, r io.Reader, maxSize int64) ([]byte, error) {
	var header [HeaderSize]byte
	if _, err := io.ReadFull(r, header[:]); err != nil {
		return dst, payloadError(ErrMalformed, 0, "blob header: %v", err)
	}
	if _, err := BlobPayload(header[:]); err != nil {
		return dst, err
	}
	if header[5] == compressionNone {
		return appendFrom(dst, r, maxSize)
	}
	dec, err := getDecoder()
	if err != nil {
		return dst, err
	}
	defer decoders.Put(dec)
	if err := dec.Reset(r); err != nil {
		return dst, payloadError(ErrMalformed, -1, "zstd: %v", err)
	}
	return appendFrom(dst, dec, maxSize)
}

// DecompressZstdFrom decompresses the zstd frames read from r, refusing more than maxSize bytes;
// sizeHint (if known) sizes the result at once. It trusts sizeHint: it is for stored blobs, whose
// sizes this daemon wrote. A client's body goes through DecompressBody.
func DecompressZstdFrom(r io.Reader, sizeHint, maxSize int64) ([]byte, error) {
	dec, err := getDecoder()
	if err != nil {
		return nil, err
	}
	defer decoders.Put(dec)
	if err := dec.Reset(r); err != nil {
		return nil, payloadError(ErrMalformed, -1, "zstd: %v", err)
	}
	return appendFrom(make([]byte, 0, min(max(sizeHint, 0), maxSize)+1), dec, maxSize)
}

// FrameContentSize returns the decompressed size a zstd frame's header declares (-1 if it does not).
func FrameContentSize(frame []byte) int64 {
	var h zstd.Header
	if h.Decode(frame) == nil && h.HasFCS {
		return int64(h.FrameContentSize)
	}
	return -1
}

func getDecoder() (*zstd.Decoder, error) {
	if dec, _ := decoders.Get().(*zstd.Decoder); dec != nil {
		return dec, nil
	}
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(64<<20))
	if err != nil {
		return nil, payloadError(ErrMalformed, -1, "zstd: %v", err)
	}
	return dec, nil
}

// appendFrom reads r to its end into dst's spare capacity (growing it only if r holds more than
// fits), refusing more than maxSize bytes.
func appendFrom(dst []byte, r io.Reader, maxSize int64) ([]byte, error) {
	start := len(dst)
	r = io.LimitReader(r, maxSize+1) // a decompression bomb costs at most maxSize+1 bytes
	var probe [1]byte
	for {
		if len(dst) == cap(dst) {
			// Full: is there more? Read one byte rather than grow a buffer sized exactly right.
			n, err := r.Read(probe[:])
			if n > 0 {
				dst = append(dst, probe[0])
			}
			if err == io.EOF {
				return dst, tooLarge(len(dst)-start, maxSize)
			}
			if err != nil {
				return dst, payloadError(ErrMalformed, -1, "reading: %v", err)
			}
			if n == 0 {
				continue
			}
		} else {
			n, err := r.Read(dst[len(dst):cap(dst)])
			dst = dst[:len(dst)+n]
			if err == io.EOF {
				return dst, tooLarge(len(dst)-start, maxSize)
			}
			if err != nil {
				return dst, payloadError(ErrMalformed, -1, "reading: %v", err)
			}
		}
		if err := tooLarge(len(dst)-start, maxSize); err != nil {
			return dst, err
		}
	}
}

func tooLarge(n int, maxSize int64) error {
	if int64(n) > maxSize {
		return payloadError(ErrTooLarge, -1, "decompresses to more than %d bytes", maxSize)
	}
	return nil
}
