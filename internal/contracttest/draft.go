package contracttest

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// runDraft holds the middleware to the IETF httpapi Idempotency-Key draft's
// key rules, as its outside compliance suite tests them: a bare key with
// commas is refused (an intermediary's merge of two fields), and every key
// problem names the draft's section it answers.
func runDraft(t *testing.T, mount Mount, b backend) {
	const payment = `{"amount": 1200, "currency": "EUR", "customer": "cus_1"}`

	t.Run("a bare key with commas gets 400 key-malformed saying why; a quoted key may hold a comma", func(t *testing.T) {
		e := newEnv(t, b, mount, envConfig{})
		before := e.keys()
		r := e.do(req{key: "key,with,commas,longer-than-twenty-chars", body: payment})
		require.Equal(t, http.StatusBadRequest, r.status, "%s", r.body)
		require.Equal(t, "key-malformed", r.problemType(t))
		require.Contains(t, string(r.body), "merge", "the detail says why a comma is refused")
		require.Zero(t, e.app.total.Load())
		e.requireNoNewKeys(t, before)

		quoted := e.do(req{key: `"a,b-` + newKey() + `"`, body: payment})
		require.Equal(t, http.StatusCreated, quoted.status, "%s", quoted.body)
	})

	t.Run("key problems name their section of the draft", func(t *testing.T) {
		e := newEnv(t, b, mount, envConfig{})
		key := newKey()
		require.Equal(t, http.StatusCreated, e.do(req{key: key, body: payment}).status)
		for name, c := range map[string]struct {
			r       req
			slug    string
			section string
		}{
			"missing":   {req{noKey: true, body: payment}, "key-missing", "section-2.1"},
			"malformed": {req{key: strings.Repeat("k", 256), body: payment}, "key-malformed", "section-2.1"},
			"reused":    {req{key: key, body: `{"amount": 9900}`}, "key-reused", "section-2.2"},
		} {
			r := e.do(c.r)
			require.Equal(t, c.slug, r.problemType(t), name)
			require.True(t, strings.HasSuffix(r.spec(t), "#"+c.section), "%s: %s", name, r.body)
		}

		slow := newKey()
		done := make(chan *response)
		go func() { done <- e.do(req{path: "/slow", key: slow}) }()
		require.Equal(t, slow, <-e.app.started)
		dup := e.do(req{path: "/slow", key: slow})
		require.Equal(t, "request-in-progress", dup.problemType(t))
		require.True(t, strings.HasSuffix(dup.spec(t), "#section-2.6"), "%s", dup.body)
		e.app.open()
		require.Equal(t, http.StatusCreated, (<-done).status)

		// A problem that is not about the key names no section.
		big := e.do(req{key: newKey(), body: `{"pad":"` + strings.Repeat("x", 2<<20) + `"}`})
		require.Equal(t, "body-too-large", big.problemType(t))
		require.Empty(t, big.spec(t))
	})
}

// spec returns a problem's "spec" member: the draft section it answers.
func (r *response) spec(t testing.TB) string {
	t.Helper()
	var p struct {
		Spec string `json:"spec"`
	}
	require.NoError(t, json.Unmarshal(r.body, &p))
	return p.Spec
}
