package grpcmw

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemkey/idemkey/redisstore"
)

// outcomeVector is a gRPC outcome of the golden vectors (testdata/spec,
// docs/spec.md §10.3).
type outcomeVector struct {
	Name      string          `json:"name"`
	WrittenBy string          `json:"written_by"`
	Code      int             `json:"code"`
	Hex       string          `json:"hex"`
	Fields    json.RawMessage `json:"fields"`
	Refused   string          `json:"refused"`
}

// specBytes is bytes as the spec's JSON views write them.
func specBytes(s string) any {
	if utf8.ValidString(s) {
		return s
	}
	return map[string]string{"hex": hex.EncodeToString([]byte(s))}
}

func pairs(md metadata.MD) [][2]any {
	keys := make([]string, 0, len(md))
	for k := range md {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := [][2]any{}
	for _, k := range keys {
		for _, v := range md[k] {
			out = append(out, [2]any{specBytes(k), specBytes(v)})
		}
	}
	return out
}

// jsonView parses JSON with exact numbers, so that two views compare by value.
func jsonView(t *testing.T, b []byte) any {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	require.NoError(t, d.Decode(&v))
	return v
}

// TestOutcomeVectors: the decoder reads every gRPC outcome of the golden
// vectors as the vector says, or refuses it as it says; the outcomes the
// interceptor writes are written byte for byte from what they hold, and
// replay as the message or status they hold. A change that fails here
// changed the stored format: it must bump the spec's major version and keep
// reading these bytes.
func TestOutcomeVectors(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "testdata", "spec", "outcomes.json"))
	require.NoError(t, err)
	var file struct {
		Spec string          `json:"spec"`
		GRPC []outcomeVector `json:"grpc"`
	}
	require.NoError(t, json.Unmarshal(b, &file))
	require.Equal(t, redisstore.SpecVersion, file.Spec)
	require.NotEmpty(t, file.GRPC)
	_ = wrapperspb.String // its type resolves by name in the replay below
	for _, v := range file.GRPC {
		t.Run(v.Name, func(t *testing.T) {
			body, err := hex.DecodeString(v.Hex)
			require.NoError(t, err)
			stored := redisstore.Response{Code: v.Code, Body: body}
			o, err := decodeOutcome(stored)
			var got any
			switch {
			case err != nil && (len(body) == 0 || body[0] == outcomeVersion):
				require.ErrorIs(t, err, errUnreadable)
				got = map[string]any{"refused": "malformed"}
			case err != nil:
				require.ErrorIs(t, err, errUnreadable)
				got = map[string]any{"refused": "unknown-version"}
			default:
				got = map[string]any{"version": 1, "type": specBytes(o.typeName), "message": hex.EncodeToString(o.payload),
					"header": pairs(o.header), "trailer": pairs(o.trailer)}
			}
			gotJSON, err := json.Marshal(got)
			require.NoError(t, err)
			want := v.Fields
			if v.Refused != "" {
				want, err = json.Marshal(map[string]any{"refused": v.Refused})
				require.NoError(t, err)
			}
			require.Equal(t, jsonView(t, want), jsonView(t, gotJSON))
			if v.WrittenBy == "" {
				return
			}
			require.Equal(t, stored, o.response(), "written byte for byte")
			resp, callErr, err := o.result(protoregistry.GlobalTypes)
			require.NoError(t, err)
			if o.code == codes.OK {
				require.NoError(t, callErr)
				require.NotNil(t, resp)
			} else {
				require.Equal(t, o.code, status.Code(callErr))
			}
		})
	}
}
