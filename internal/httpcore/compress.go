package httpcore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// zstdMagic starts every zstd frame; stored frames leave it out.
var zstdMagic = [4]byte{0x28, 0xb5, 0x2f, 0xfd}

// maxDecoded bounds what any decoder keeps in memory: Redis strings stop
// at 512 MiB, so a frame that claims more is corrupt.
const maxDecoded = 1 << 30

// defaultLimit bounds what a stored payload may decompress to when the
// codec is not told MaxResponseBytes (the tools': inspect passes its
// --max-response-bytes): what the middleware stores by default. A record
// of a few KiB must not inflate to a gigabyte in a tool.
const defaultLimit = DefaultMaxResponseBytes + HeaderAllowance

// DefaultMaxResponseBytes is the middleware's default MaxResponseBytes,
// and the bound of a codec that is not told one.
const DefaultMaxResponseBytes = 1 << 20

// HeaderAllowance is what the headers of a stored response may add to
// MaxResponseBytes before the middleware stores it compressed: a compressed
// response that decompresses to more than MaxResponseBytes plus this is
// corrupt. Responses with more header bytes are stored uncompressed.
const HeaderAllowance = 64 << 10

// minCompress is the smallest payload worth a try: a zstd frame costs at
// least 6 bytes, and without a dictionary nothing this short shrinks.
const minCompress = 32

// ErrUnknownDictionary is returned (wrapped, with the dictionary's ID) for a
// stored response compressed with a dictionary that the decoder was not
// given. It is an ErrCorruptResponse too.
var ErrUnknownDictionary = fmt.Errorf("%w: compressed with a dictionary that is not configured", ErrCorruptResponse)

// Compression is how stored responses are compressed.
type Compression struct {
	// On compresses stored responses with zstd, each only if that makes it
	// smaller.
	On bool
	// Dictionaries are zstd dictionaries: the first compresses (and turns
	// compression on), and all of them decode.
	Dictionaries [][]byte
	// MaxResponseBytes is the largest body a stored response can have (the
	// middleware's Options.MaxResponseBytes). A compressed response that
	// decompresses to more than MaxResponseBytes plus HeaderAllowance is
	// corrupt (however small its record), and a response larger than that
	// is stored uncompressed. 0 means DefaultMaxResponseBytes: a tool that
	// reads records stored under a larger MaxResponseBytes passes it.
	MaxResponseBytes int
}

// ResponseCodec encodes responses for storage and decodes them for replay,
// compressing as its Compression says. Decoding reads every version and
// every frame compressed with no dictionary or one it holds, whether or not
// it compresses. A nil *ResponseCodec stores uncompressed. It is safe for
// concurrent use.
type ResponseCodec struct {
	enc   *zstd.Encoder                 // nil: store uncompressed
	dec   func() (*zstd.Decoder, error) // made on first need
	dict  uint32                        // the ID of the dictionary enc uses, 0 for none
	limit uint64                        // the most a stored payload may be, decompressed
}

// The encoder and decoder without dictionaries are shared by every Guard (a
// zstd encoder or decoder keeps buffers per concurrent call; one of each is
// plenty).
var (
	plainDecoder = sync.OnceValues(func() (*zstd.Decoder, error) { return newDecoder(nil) })
	plainEncoder = sync.OnceValue(func() *zstd.Encoder {
		enc, err := newEncoder(nil)
		if err != nil {
			panic(err) // no dictionary: only a bug in the options could fail
		}
		return enc
	})
)

// NewResponseCodec returns a codec for c. It fails if a dictionary is not a
// zstd dictionary (as idemkey dict train writes them), has ID 0, or shares
// its ID with another.
func NewResponseCodec(c Compression) (*ResponseCodec, error) {
	limit := uint64(defaultLimit)
	if c.MaxResponseBytes > 0 {
		limit = uint64(c.MaxResponseBytes) + HeaderAllowance
	}
	if len(c.Dictionaries) == 0 {
		switch {
		case c.On:
			return &ResponseCodec{enc: plainEncoder(), dec: plainDecoder, limit: limit}, nil
		case c.MaxResponseBytes > 0:
			return &ResponseCodec{dec: plainDecoder, limit: limit}, nil
		}
		return nil, nil
	}
	seen := make(map[uint32]bool, len(c.Dictionaries))
	for i, d := range c.Dictionaries {
		id, err := DictionaryID(d)
		if err != nil {
			return nil, fmt.Errorf("idemkey: dictionary %d: %w", i, err)
		}
		if seen[id] {
			return nil, fmt.Errorf("idemkey: dictionary %d: ID %d is used by another dictionary", i, id)
		}
		seen[id] = true
	}
	enc, err := newEncoder(c.Dictionaries[0])
	if err != nil {
		return nil, fmt.Errorf("idemkey: dictionary 0: %w", err)
	}
	dec, err := newDecoder(c.Dictionaries)
	if err != nil {
		return nil, fmt.Errorf("idemkey: dictionaries: %w", err)
	}
	id, _ := DictionaryID(c.Dictionaries[0])
	return &ResponseCodec{enc: enc, dec: func() (*zstd.Decoder, error) { return dec, nil }, dict: id, limit: limit}, nil
}

// DictionaryID returns the ID of a zstd dictionary, or an error if d is not
// one (a dictionary must have a non-zero ID, which the frames compressed
// with it carry).
func DictionaryID(d []byte) (uint32, error) {
	if len(d) < 8 || binary.LittleEndian.Uint32(d) != 0xEC30A437 {
		return 0, errors.New("not a zstd dictionary (it must start with the dictionary magic number; see idemkey dict train)")
	}
	id := binary.LittleEndian.Uint32(d[4:])
	if id == 0 {
		return 0, errors.New("a dictionary with ID 0 cannot be told apart from none")
	}
	return id, nil
}

// newEncoder returns the encoder for stored responses: the fastest level
// (the first execution waits for it), no checksum (Redis is not a lossy
// medium, and the frame's content size is checked on decode), one segment
// (the smallest frame header).
func newEncoder(dict []byte) (*zstd.Encoder, error) {
	opts := []zstd.EOption{zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderCRC(false),
		zstd.WithSingleSegment(true)}
	if dict != nil {
		opts = append(opts, zstd.WithEncoderDict(dict))
	}
	return zstd.NewWriter(nil, opts...)
}

func newDecoder(dicts [][]byte) (*zstd.Decoder, error) {
	// DecodeAll writes no more than its buffer holds (see decompress).
	opts := []zstd.DOption{zstd.WithDecoderConcurrency(0), zstd.WithDecoderMaxMemory(maxDecoded), zstd.WithDecodeAllCapLimit(true)}
	if len(dicts) > 0 {
		opts = append(opts, zstd.WithDecoderDicts(dicts...))
	}
	return zstd.NewReader(nil, opts...)
}

// Compresses reports whether c stores responses compressed, and the ID of
// the dictionary it compresses with (0 for none).
func (c *ResponseCodec) Compresses() (on bool, dictionary uint32) {
	if c == nil || c.enc == nil {
		return false, 0
	}
	return true, c.dict
}

// Append appends the stored form of a response to dst: version 2, its
// payload compressed when that makes it smaller.
func (c *ResponseCodec) Append(dst []byte, h http.Header, body []byte, omitted bool) []byte {
	var stack [16]hfield
	return c.appendFields(dst, fieldsOf(stack[:0], h), body, omitted)
}

// appendFields is Append with the headers as fields, sorted by name.
func (c *ResponseCodec) appendFields(dst []byte, fs []hfield, body []byte, omitted bool) []byte {
	start := len(dst)
	dst = appendFields(dst, fs, body, omitted)
	if n := len(dst) - start - 1; c == nil || c.enc == nil || n < minCompress || uint64(n) > c.limit {
		return dst // beyond the limit only with huge headers: stored as is, replayable
	}
	payload := dst[start+1:]
	// Compress after the raw payload and keep the frame only if it is
	// smaller; the buffer is allocated once, as large as the raw payload.
	z := c.enc.EncodeAll(payload, make([]byte, 0, len(payload)+16))
	if len(z)-len(zstdMagic) >= len(payload) {
		return dst
	}
	dst = append(dst[:start+1], z[len(zstdMagic):]...)
	dst[start] |= flagCompressed
	return dst
}

// Decode decodes a stored response with its status code: either version,
// compressed or not. It returns ErrCorruptResponse for bytes that are not a
// stored response, ErrUnknownResponseVersion (wrapped; an
// ErrCorruptResponse too) for a version or flags it does not read, and
// ErrUnknownDictionary (wrapped) for one compressed with a dictionary c
// does not hold.
func (c *ResponseCodec) Decode(status int, b []byte) (*StoredResponse, error) {
	if len(b) == 0 {
		return nil, ErrCorruptResponse
	}
	if b[0] == responseV1 {
		return decodeV1(status, b)
	}
	if b[0]&^flagsV2 != responseV2 {
		return nil, fmt.Errorf("%w (first byte %#02x)", ErrUnknownResponseVersion, b[0])
	}
	r := &StoredResponse{Status: status, BodyOmitted: b[0]&flagBodyOmitted != 0, Compressed: b[0]&flagCompressed != 0}
	payload := b[1:]
	if r.Compressed {
		var err error
		if payload, err = c.decompress(payload); err != nil {
			return nil, err
		}
	}
	if err := decodeV2Payload(r, payload); err != nil {
		return nil, err
	}
	return r, nil
}

// decompress decodes a stored zstd frame (without its magic number).
func (c *ResponseCodec) decompress(frame []byte) ([]byte, error) {
	dec, err := plainDecoder()
	if c != nil && c.dec != nil {
		dec, err = c.dec()
	}
	if err != nil {
		return nil, fmt.Errorf("%w: no decoder: %v", ErrCorruptResponse, err)
	}
	limit := uint64(defaultLimit) // a nil codec: a tool's
	if c != nil {
		limit = c.limit
	}
	full := make([]byte, 0, len(zstdMagic)+len(frame))
	full = append(append(full, zstdMagic[:]...), frame...)
	var h zstd.Header
	if err := h.Decode(full); err != nil || !h.HasFCS {
		return nil, ErrCorruptResponse
	}
	if h.FrameContentSize > limit {
		// More than the middleware could have stored: a corrupt record, or
		// one stored under a larger MaxResponseBytes.
		return nil, fmt.Errorf("%w: it decompresses to %d bytes, more than MaxResponseBytes plus %d bytes of headers",
			ErrCorruptResponse, h.FrameContentSize, HeaderAllowance)
	}
	// Room for what the frame says it holds, but no more than its blocks
	// can hold (a block of at least 4 bytes makes at most 128 KiB): a
	// corrupt header must not make a huge allocation.
	out, err := dec.DecodeAll(full, make([]byte, 0, min(h.FrameContentSize, uint64(len(frame))<<15)))
	switch {
	case errors.Is(err, zstd.ErrUnknownDictionary):
		return nil, fmt.Errorf("%w (ID %d)", ErrUnknownDictionary, h.DictionaryID)
	case err != nil:
		return nil, fmt.Errorf("%w: %v", ErrCorruptResponse, err)
	case uint64(len(out)) != h.FrameContentSize:
		return nil, ErrCorruptResponse
	}
	return out, nil
}
