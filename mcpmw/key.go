package mcpmw

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemkey/idemkey/jsoncanon"
)

// fingerprintVersion opens every fingerprint, so that a change of what it
// covers never lets an old record match a new call.
const fingerprintVersion = "mcpmw/1"

// keyOf returns the call's key, from params._meta.idempotencyKey or the key
// argument: found is false when neither is there (with Options.Optional, a
// null or empty one is not there); reason is why a key that is there is
// refused.
func (g *guard) keyOf(p *mcp.CallToolParamsRaw) (key string, found bool, reason string) {
	var fromMeta, fromArg any
	var inMeta, inArg bool
	if p.Meta != nil {
		fromMeta, inMeta = p.Meta[MetaKey]
	}
	if g.o.KeyArgument != "" && len(p.Arguments) > 0 {
		var args map[string]json.RawMessage
		if json.Unmarshal(p.Arguments, &args) == nil {
			if raw, ok := args[g.o.KeyArgument]; ok {
				inArg = true
				if err := json.Unmarshal(raw, &fromArg); err != nil {
					fromArg = raw
				}
			}
		}
	}
	if g.o.Optional {
		// A model fills in an argument it has no value for with null or
		// "": with the key optional, that is no key, not a bad one.
		inMeta = inMeta && !blank(fromMeta)
		inArg = inArg && !blank(fromArg)
	}
	switch {
	case !inMeta && !inArg:
		return "", false, ""
	case inMeta:
		key, reason = parseKey(fromMeta)
		if reason != "" {
			return "", true, "_meta." + MetaKey + ": " + reason
		}
		if inArg {
			if k, r := parseKey(fromArg); r != "" || k != key {
				return "", true, fmt.Sprintf("_meta.%s and the argument %q give two different keys", MetaKey, g.o.KeyArgument)
			}
		}
		return key, true, ""
	default:
		key, reason = parseKey(fromArg)
		if reason != "" {
			return "", true, fmt.Sprintf("the argument %q: %s", g.o.KeyArgument, reason)
		}
		return key, true, ""
	}
}

// blank reports whether a key's JSON value is null or the empty string.
func blank(v any) bool {
	s, isString := v.(string)
	return v == nil || (isString && s == "")
}

// recordKey is the store's key for a call: the tool's name and the
// client's key, length-prefixed so that no two (tool, key) pairs meet.
func recordKey(tool, key string) string {
	return strconv.Itoa(len(tool)) + ":" + tool + key
}

// fingerprint is SHA-256 over the version, the tool's name and the
// canonical JSON of its arguments (Options.Ignore and the key argument
// left out; absent arguments count as {}).
func (g *guard) fingerprint(tool string, args json.RawMessage) (string, error) {
	if len(bytes.TrimSpace(args)) == 0 || bytes.Equal(bytes.TrimSpace(args), []byte("null")) {
		args = json.RawMessage("{}")
	}
	h := sha256.New()
	h.Write([]byte(fingerprintVersion))
	h.Write([]byte{0})
	h.Write([]byte(strconv.Itoa(len(tool)) + ":" + tool))
	if _, err := jsoncanon.Write(h, args, jsoncanon.Options{Omit: g.omit}); err != nil {
		var se *jsoncanon.SyntaxError
		if errors.As(err, &se) {
			return "", fmt.Errorf("the arguments cannot be fingerprinted: %s at byte %d", se.Msg, se.Offset)
		}
		return "", err
	}
	return string(h.Sum(nil)), nil
}
