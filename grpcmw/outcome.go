package grpcmw

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/idemkey/idemkey/redisstore"
)

// A stored outcome is redisstore.Response{Code: the gRPC code, Body: the
// encoding below}, version 1:
//
//	0x01
//	string  the response message's full name ("" for a status error)
//	bytes   the response message, or the google.rpc.Status of the error
//	md      the header metadata the handler set
//	md      the trailer metadata the handler set
//
// where string and bytes are a uvarint length and the bytes, and md is a
// uvarint count of pairs and then each key and value as a string, keys in
// order. The response's type is resolved by its recorded name when it is
// replayed (Options.Types), so no service descriptor needs to be
// registered: a hand-written grpc.ServiceDesc replays as well as a
// generated one.
const outcomeVersion = 1

// errUnreadable marks a stored outcome that cannot be decoded.
var errUnreadable = errors.New("grpcmw: stored outcome unreadable")

// outcome is a call's result, as stored and replayed.
type outcome struct {
	code     codes.Code
	typeName string
	payload  []byte // the message, or the google.rpc.Status
	header   metadata.MD
	trailer  metadata.MD
}

// newOutcome makes the outcome of a handler that returned resp and err.
func newOutcome(resp any, err error, header, trailer metadata.MD) (*outcome, error) {
	o := &outcome{header: header, trailer: trailer}
	if err != nil {
		st := status.Convert(err)
		o.code = st.Code()
		b, merr := proto.Marshal(st.Proto())
		if merr != nil {
			return nil, fmt.Errorf("grpcmw: encode the status: %w", merr)
		}
		o.payload = b
		return o, nil
	}
	m, ok := resp.(proto.Message)
	if !ok || resp == nil {
		return nil, fmt.Errorf("grpcmw: the response is a %T, not a proto.Message, and cannot be stored", resp)
	}
	b, merr := proto.Marshal(m)
	if merr != nil {
		return nil, fmt.Errorf("grpcmw: encode the response: %w", merr)
	}
	o.typeName, o.payload = string(proto.MessageName(m)), b
	return o, nil
}

// response is the outcome as the store keeps it.
func (o *outcome) response() redisstore.Response {
	b := make([]byte, 0, 16+len(o.typeName)+len(o.payload))
	b = append(b, outcomeVersion)
	b = appendString(b, o.typeName)
	b = appendString(b, string(o.payload))
	b = appendMD(b, o.header)
	b = appendMD(b, o.trailer)
	return redisstore.Response{Code: int(o.code), Body: b}
}

func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

func appendMD(b []byte, md metadata.MD) []byte {
	keys := make([]string, 0, len(md))
	n := 0
	for k, vs := range md {
		keys = append(keys, k)
		n += len(vs)
	}
	sort.Strings(keys)
	b = binary.AppendUvarint(b, uint64(n))
	for _, k := range keys {
		for _, v := range md[k] {
			b = appendString(appendString(b, k), v)
		}
	}
	return b
}

// decodeOutcome reads a stored outcome; its errors match errUnreadable.
func decodeOutcome(r redisstore.Response) (*outcome, error) {
	d := decoder{b: r.Body}
	if len(d.b) == 0 || d.b[0] != outcomeVersion {
		return nil, fmt.Errorf("%w: not a gRPC outcome of a known version", errUnreadable)
	}
	d.b = d.b[1:]
	o := &outcome{code: codes.Code(r.Code)}
	o.typeName = d.string()
	o.payload = []byte(d.string())
	o.header = d.md()
	o.trailer = d.md()
	if d.bad || len(d.b) != 0 {
		return nil, fmt.Errorf("%w: truncated or overlong", errUnreadable)
	}
	if (o.code == codes.OK) != (o.typeName != "") || r.Code < 0 || r.Code > 16 {
		return nil, fmt.Errorf("%w: code %d with type %q", errUnreadable, r.Code, o.typeName)
	}
	return o, nil
}

type decoder struct {
	b   []byte
	bad bool
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.bad = true
		d.b = nil
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) string() string {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.bad = true
		d.b = nil
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

func (d *decoder) md() metadata.MD {
	n := d.uvarint()
	if n == 0 || d.bad {
		return nil
	}
	if n > uint64(len(d.b)) { // every pair takes at least two bytes
		d.bad = true
		return nil
	}
	md := metadata.MD{}
	for i := uint64(0); i < n && !d.bad; i++ {
		k := d.string()
		md[k] = append(md[k], d.string())
	}
	return md
}

// result returns what the replayed call returns: a new message of the
// recorded type, or the stored status as callErr; err says why neither
// could be made.
func (o *outcome) result(types protoregistry.MessageTypeResolver) (resp any, callErr, err error) {
	if o.code != codes.OK {
		var st spb.Status
		if err := proto.Unmarshal(o.payload, &st); err != nil {
			return nil, nil, fmt.Errorf("%w: status: %w", errUnreadable, err)
		}
		if codes.Code(st.GetCode()) != o.code {
			return nil, nil, fmt.Errorf("%w: status code %d under code %d", errUnreadable, st.GetCode(), o.code)
		}
		return nil, status.ErrorProto(&st), nil
	}
	mt, err := types.FindMessageByName(protoreflect.FullName(o.typeName))
	if err != nil {
		return nil, nil, fmt.Errorf("%w: response type %q: %w", errUnreadable, o.typeName, err)
	}
	m := mt.New().Interface()
	if err := proto.Unmarshal(o.payload, m); err != nil {
		return nil, nil, fmt.Errorf("%w: response: %w", errUnreadable, err)
	}
	return m, nil, nil
}
