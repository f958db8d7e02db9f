package httpcore

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/redisstore"
)

// fpRequest is a request to fingerprint.
type fpRequest struct {
	method, target string
	header         http.Header
	body           []byte
}

func (q fpRequest) build() *http.Request {
	method, target := q.method, q.target
	if method == "" {
		method = http.MethodPost
	}
	if target == "" {
		target = "/p"
	}
	r := httptest.NewRequest(method, target, nil)
	for k, vs := range q.header {
		r.Header[textproto.CanonicalMIMEHeaderKey(k)] = vs
	}
	return r
}

// fpOf fingerprints q, which must not be a problem.
func fpOf(t *testing.T, h *Guard, q fpRequest) string {
	t.Helper()
	f, p := h.fingerprint(q.build(), q.body)
	require.Nil(t, p, "problem for %q", q.body)
	require.Len(t, f, 32)
	return f
}

func ct(v string) http.Header { return http.Header{"Content-Type": {v}} }

// TestFingerprintStable pins the fingerprints of JSON, raw and empty bodies
// as computed before multipart and Content-Encoding were told apart: they
// are kept in Redis, so a new version must give the same for the same
// request, or a retry across an upgrade gets 422.
func TestFingerprintStable(t *testing.T) {
	h := &Guard{o: Config{FingerprintHeaders: []string{"Api-Version"}, IgnoreFields: []string{"sent_at"}}.withDefaults()}
	big := largeJSON(200 << 10) // read in two passes and streamed into the hash
	tests := []struct {
		name string
		q    fpRequest
		want string
	}{
		{"small JSON", fpRequest{target: "/p?b=2&a=1", header: ct("application/json"), body: []byte(`{ "y": [1, 2], "x": 1.0, "sent_at": "now" }`)},
			"f9b43a442892f68cccc35a3edf63008998f4a95a6dc37fb73d26872d47334440"},
		{"large JSON", fpRequest{header: ct("application/json"), body: big},
			"e1fa226a572769195e71cf10a00fb43573118f4aa93b19ffb50e5e0bf442f456"},
		{"text", fpRequest{method: http.MethodPut, target: "/t", header: ct("text/plain"), body: []byte("a  b")},
			"4c3d147e44828a05188b3d944324a7b7e128b727319a6cf0f91ffc9bac3742ec"},
		{"large bytes", fpRequest{header: ct("application/octet-stream"), body: bytes.Repeat([]byte("0123456789abcdef"), 100<<10/16)},
			"f0d23cb9a0c13a6a464bbd3499364257f8fb1a791eac673f20149657b71010a7"},
		{"empty", fpRequest{method: http.MethodDelete, target: "/d/1"},
			"e3cc77d22af7260bca7381b78cf136d0f7133dc2edebaa8ecee4859fc33b0501"},
		{"header", fpRequest{header: http.Header{"Content-Type": {"application/json"}, "Api-Version": {"2", "3"}}, body: []byte(`{}`)},
			"7a5843e89e4adcfe5d05e31dbd2bfa87e3bbdd77ff49f3038351ab20d415e4f5"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, hex.EncodeToString([]byte(fpOf(t, h, tt.q))))
		})
	}
}

// largeJSON returns an indented JSON object of at least n bytes with its
// members out of order.
func largeJSON(n int) []byte {
	var b bytes.Buffer
	b.WriteString("{\n")
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "  \"k%06d\": {\"z\": %d, \"a\": [1.50, \"x\\u00e9\", null, true]},\n", 1_000_000-i, i)
	}
	b.WriteString("  \"end\": 0\n}\n")
	return b.Bytes()
}

// part is one part of a multipart/form-data body.
type part struct {
	name, filename, contentType, content string
	noFilename                           bool // leave filename out of Content-Disposition
}

// form encodes parts as multipart/form-data with boundary, as Go's writer
// does, and returns the body and its Content-Type.
func form(t testing.TB, boundary string, parts ...part) fpRequest {
	t.Helper()
	var b bytes.Buffer
	w := multipart.NewWriter(&b)
	require.NoError(t, w.SetBoundary(boundary))
	for _, p := range parts {
		hdr := textproto.MIMEHeader{}
		disp := fmt.Sprintf(`form-data; name=%q`, p.name)
		if !p.noFilename {
			disp += fmt.Sprintf(`; filename=%q`, p.filename)
		}
		hdr.Set("Content-Disposition", disp)
		if p.contentType != "" {
			hdr.Set("Content-Type", p.contentType)
		}
		pw, err := w.CreatePart(hdr)
		require.NoError(t, err)
		_, err = io.WriteString(pw, p.content)
		require.NoError(t, err)
	}
	require.NoError(t, w.Close())
	return fpRequest{header: ct(w.FormDataContentType()), body: b.Bytes()}
}

// TestMultipartFingerprint: a client that retries an upload re-encodes it
// with a new random boundary. Before, multipart bodies were fingerprinted
// as raw bytes, so the retry got 422; now by their parts.
func TestMultipartFingerprint(t *testing.T) {
	h := &Guard{o: Config{}.withDefaults()}
	text := part{name: "note", content: "hello", noFilename: true}
	file := part{name: "doc", filename: "a.txt", contentType: "text/plain", content: "line 1\r\n--not a boundary\r\n"}
	base := fpOf(t, h, form(t, "boundary-one", text, file))

	t.Run("another boundary is the same request", func(t *testing.T) {
		require.Equal(t, base, fpOf(t, h, form(t, "b2-0123456789abcdef", text, file)))
		// Go's writer picks a random boundary: two encodings agree.
		var b bytes.Buffer
		w := multipart.NewWriter(&b)
		require.NoError(t, w.WriteField("note", "hello"))
		fw, err := w.CreateFormFile("doc", "a.txt") // application/octet-stream
		require.NoError(t, err)
		_, _ = io.WriteString(fw, "x")
		require.NoError(t, w.Close())
		q := fpRequest{header: ct(w.FormDataContentType()), body: b.Bytes()}
		file2 := part{name: "doc", filename: "a.txt", contentType: "application/octet-stream", content: "x"}
		require.Equal(t, fpOf(t, h, form(t, "zzz", text, file2)), fpOf(t, h, q))
	})

	t.Run("framing that parsers ignore is the same request", func(t *testing.T) {
		q := form(t, "bnd", text, file)
		withPreamble := fpRequest{header: q.header, body: append([]byte("preamble\r\n"), q.body...)}
		require.Equal(t, base, fpOf(t, h, withPreamble))
		withEpilogue := fpRequest{header: q.header, body: append(bytes.Clone(q.body), "epilogue\r\n"...)}
		require.Equal(t, base, fpOf(t, h, withEpilogue))
		// Bare LF line ends, which Go's reader accepts too.
		lf := fpRequest{header: q.header, body: []byte("--bnd\nContent-Disposition: form-data; name=\"note\"\n\nhello\n" +
			"--bnd\nContent-Type: text/plain\nContent-Disposition: form-data; name=\"doc\"; filename=\"a.txt\"\n\n" +
			file.content + "\n--bnd--\n")}
		require.Equal(t, base, fpOf(t, h, lf))
		q2 := form(t, "bnd", text, file)
		q2.header = ct(`multipart/form-data; charset=utf-8; boundary="bnd"`)
		require.Equal(t, base, fpOf(t, h, q2))
		q2.header = ct(`Multipart/Form-Data;boundary=bnd`)
		require.Equal(t, base, fpOf(t, h, q2))
	})

	t.Run("any change to a part is another request", func(t *testing.T) {
		seen := map[string]string{base: "base"}
		for name, parts := range map[string][]part{
			"content":          {text, {name: "doc", filename: "a.txt", contentType: "text/plain", content: "line 2\r\n"}},
			"name":             {{name: "Note", content: "hello", noFilename: true}, file},
			"filename":         {text, {name: "doc", filename: "b.txt", contentType: "text/plain", content: file.content}},
			"no filename":      {text, {name: "doc", noFilename: true, contentType: "text/plain", content: file.content}},
			"empty filename":   {text, {name: "doc", filename: "", contentType: "text/plain", content: file.content}},
			"content type":     {text, {name: "doc", filename: "a.txt", contentType: "text/csv", content: file.content}},
			"no content type":  {text, {name: "doc", filename: "a.txt", content: file.content}},
			"order":            {file, text},
			"extra part":       {text, file, {name: "x", noFilename: true}},
			"one part":         {text},
			"no parts":         {},
			"content moved":    {{name: "note", content: "hell", noFilename: true}, {name: "doc", filename: "a.txt", contentType: "text/plain", content: "o" + file.content}},
			"part boundary in": {{name: "note", content: "hello\r\n--x", noFilename: true}, file},
		} {
			f := fpOf(t, h, form(t, "boundary-one", parts...))
			other, dup := seen[f]
			require.False(t, dup, "%s hashes like %s", name, other)
			seen[f] = name
		}
		// The bytes of a form sent as another type are another request.
		q := form(t, "boundary-one", text, file)
		q.header = ct("application/octet-stream")
		require.NotContains(t, seen, fpOf(t, h, q))
	})

	t.Run("a body that does not parse is fingerprinted as bytes", func(t *testing.T) {
		good := form(t, "bnd", text, file)
		many := make([]part, maxFormParts+1)
		for i := range many {
			many[i] = part{name: "p", noFilename: true}
		}
		bigHeader := form(t, "bnd", part{name: strings.Repeat("n", maxPartHeaderBytes), noFilename: true})
		for name, q := range map[string]fpRequest{
			"no boundary":         {header: ct("multipart/form-data"), body: good.body},
			"empty boundary":      {header: ct("multipart/form-data; boundary="), body: good.body},
			"bad media type":      {header: ct("multipart/form-data; boundary"), body: good.body},
			"other boundary":      {header: ct("multipart/form-data; boundary=zz"), body: good.body},
			"truncated":           {header: good.header, body: good.body[:len(good.body)-10]},
			"no closing":          {header: good.header, body: bytes.TrimSuffix(good.body, []byte("--bnd--\r\n"))},
			"garbage":             {header: good.header, body: []byte("\x00\xff not a form")},
			"empty":               {header: good.header, body: nil},
			"too many parts":      form(t, "bnd", many...),
			"part header too big": bigHeader,
			"bad part header":     {header: good.header, body: []byte("--bnd\r\nno colon here\r\n\r\nx\r\n--bnd--\r\n")},
		} {
			f, p := h.fingerprint(q.build(), q.body)
			require.Nil(t, p, name)
			raw := fpOf(t, h, fpRequest{header: ct("text/plain"), body: q.body})
			require.Equal(t, raw, f, "%s: not fingerprinted as its bytes", name)
		}
		// Up to the limits, it parses.
		atLimit := form(t, "bnd", many[:maxFormParts]...)
		require.NotEqual(t, fpOf(t, h, fpRequest{header: ct("text/plain"), body: atLimit.body}), fpOf(t, h, atLimit))
	})

	t.Run("other multipart types are bytes", func(t *testing.T) {
		q := form(t, "bnd", text, file)
		q.header = ct("multipart/mixed; boundary=bnd")
		require.Equal(t, fpOf(t, h, fpRequest{header: ct("text/plain"), body: q.body}), fpOf(t, h, q))
	})
}

// TestContentEncodingFingerprint: a gzip-encoded JSON body was refused as
// malformed JSON. A body with a Content-Encoding other than identity is now
// fingerprinted as its bytes, with the encoding.
func TestContentEncodingFingerprint(t *testing.T) {
	h := &Guard{o: Config{}.withDefaults()}
	body := []byte(`{"amount": 12, "currency": "EUR"}`)
	gz := gzipped(t, body)
	enc := func(encoding string, b []byte) fpRequest {
		return fpRequest{header: http.Header{"Content-Type": {"application/json"}, "Content-Encoding": {encoding}}, body: b}
	}
	f := fpOf(t, h, enc("gzip", gz))
	require.Equal(t, f, fpOf(t, h, enc("gzip", gz)))
	require.Equal(t, f, fpOf(t, h, enc(" GZIP ", gz)))
	require.NotEqual(t, f, fpOf(t, h, enc("gzip", gzipped(t, []byte(`{"amount": 13, "currency": "EUR"}`)))))
	require.NotEqual(t, f, fpOf(t, h, enc("br", gz)), "the encoding is part of the request")
	require.NotEqual(t, f, fpOf(t, h, fpRequest{header: ct("text/plain"), body: gz}), "encoded bytes are not plain bytes")
	// Whatever the bytes and the type, never a problem.
	for _, q := range []fpRequest{
		enc("gzip", []byte("not gzip at all")),
		enc("deflate, gzip", body),
		enc("x-custom", []byte(`{"a":1,"a":2}`)),
		{header: http.Header{"Content-Type": {"multipart/form-data; boundary=b"}, "Content-Encoding": {"gzip"}}, body: gz},
	} {
		fpOf(t, h, q)
	}
	// identity, alone or listed, is no encoding: the body is JSON.
	plain := fpOf(t, h, fpRequest{header: ct("application/json"), body: body})
	require.Equal(t, plain, fpOf(t, h, enc("identity", []byte(`{"currency":"EUR","amount":12}`))))
	require.Equal(t, plain, fpOf(t, h, enc("", body)))
	_, p := h.fingerprint(enc("Identity", []byte(`{"a":`)).build(), []byte(`{"a":`))
	require.NotNil(t, p, "identity JSON is still checked")
}

// beginWith sends r through h.Begin on a fresh key; a claimed request is run
// and answered 201.
func beginWith(t *testing.T, h *Guard, r *http.Request, key string) *httptest.ResponseRecorder {
	t.Helper()
	r.Header.Set("Idempotency-Key", key)
	w := httptest.NewRecorder()
	x, pass := h.Begin(w, r, nil)
	require.Nil(t, pass)
	if x != nil {
		x.Run(func() { x.Recorder.WriteHeader(http.StatusCreated) })
	}
	return w
}

func testStoreHandler(t *testing.T, opts Config) *Guard {
	t.Helper()
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	store, err := redisstore.New(rdb, redisstore.Options{})
	require.NoError(t, err)
	if opts.Scope == nil {
		opts.Scope = func(*http.Request, any) (string, error) { return "test", nil }
	}
	return New(store, opts)
}

// TestEncodedBodyIsNotRefused sends a gzip-encoded JSON body through Begin:
// it runs (201), and its retry is replayed, where it used to get 400.
func TestEncodedBodyIsNotRefused(t *testing.T) {
	h := testStoreHandler(t, Config{})
	gz := gzipped(t, []byte(`{"amount": 12}`))
	send := func() *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, "/pay", bytes.NewReader(gz))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Content-Encoding", "gzip")
		return beginWith(t, h, r, "gz-1")
	}
	w := send()
	require.Equal(t, http.StatusCreated, w.Code, w.Body.String())
	w = send()
	require.Equal(t, http.StatusCreated, w.Code, w.Body.String())
	require.Equal(t, "true", w.Header().Get("Idempotent-Replayed"))
}

// TestMultipartRetryIsReplayed sends an upload, then its retry re-encoded
// with another boundary: the retry is replayed, where it used to get 422.
func TestMultipartRetryIsReplayed(t *testing.T) {
	h := testStoreHandler(t, Config{})
	for i, boundary := range []string{"first-boundary", "second-boundary"} {
		q := form(t, boundary, part{name: "doc", filename: "a.pdf", contentType: "application/pdf", content: "%PDF-1.7"})
		r := httptest.NewRequest(http.MethodPost, "/upload", bytes.NewReader(q.body))
		r.Header.Set("Content-Type", q.header.Get("Content-Type"))
		w := beginWith(t, h, r, "upload-1")
		require.Equal(t, http.StatusCreated, w.Code, w.Body.String())
		require.Equal(t, i == 1, w.Header().Get("Idempotent-Replayed") == "true")
	}
}

// TestProblemDetailsNameNoPackage sends hostile bodies, in the style of the
// contract suite, through Begin: no problem's title or detail names a Go
// package (a malformed JSON body used to read "canon: unexpected end of
// input..."), and a malformed JSON body's detail gives the reason and where.
func TestProblemDetailsNameNoPackage(t *testing.T) {
	h := testStoreHandler(t, Config{MaxBodyBytes: 1 << 20})
	type hostile struct {
		contentType, encoding string
		body                  []byte
		status                int
		detail                string // in the detail, if set
	}
	deep := strings.Repeat(`{"a":`, 65) + "1" + strings.Repeat("}", 65)
	var cases []hostile
	for _, jsonType := range []string{"application/json", "Application/JSON; charset=utf-8", "application/merge-patch+json"} {
		for _, c := range []hostile{
			{body: []byte(`{"amount": 12`), detail: "unexpected end of input in object at byte offset 13"},
			{body: []byte(`{"a":1,}`), detail: "invalid character '}' looking for object member name at byte offset 7"},
			{body: []byte(`{'a':1}`), detail: "at byte offset 1"},
			{body: []byte(`{"a":1,"a":2}`), detail: "same member name twice"},
			{body: []byte(strings.Repeat("[", 10000)), detail: "nests too deeply"},
			{body: []byte(deep), detail: "nests too deeply"},
			{body: []byte("\xff\xfe{}"), detail: "invalid byte 0xff"},
			{body: []byte(`["\ud800"]`), detail: "lone surrogate"},
			{body: []byte("{\"a\":\"\x01\"}"), detail: "control character"},
			{body: []byte(`{"a":01}`)}, {body: []byte(`1e`)}, {body: []byte(" ")}, {body: []byte(`{} x`)},
			{body: []byte("\ufeff{}")}, {body: []byte(`{"a":NaN}`)}, {body: []byte(`{"canon":1,"canon":2}`)},
			{body: []byte(`{"httpcore": "redisstore"`)},
			{body: []byte(`[` + strings.Repeat(`1e999999999999999999999,`, 1000) + `]`)},
		} {
			c.contentType = jsonType
			if c.status == 0 {
				c.status = http.StatusBadRequest
			}
			cases = append(cases, c)
		}
	}
	cases = append(cases,
		hostile{contentType: "application/json", body: bytes.Repeat([]byte("x"), 2<<20), status: http.StatusRequestEntityTooLarge},
		hostile{contentType: "application/json", encoding: "gzip", body: []byte("not gzip"), status: http.StatusCreated},
		hostile{contentType: "application/json", encoding: "br", body: []byte(`{"a":`), status: http.StatusCreated},
		hostile{contentType: "multipart/form-data; boundary=x", body: []byte("--x\r\nbad\r\n"), status: http.StatusCreated},
		hostile{contentType: "multipart/form-data", body: []byte("--x\r\n\r\n--x--"), status: http.StatusCreated},
		hostile{contentType: "text/plain", body: []byte(`{"amount": 12`), status: http.StatusCreated},
		hostile{contentType: "", body: []byte("\x00\x01"), status: http.StatusCreated},
	)
	for i, c := range cases {
		r := httptest.NewRequest(http.MethodPost, "/p", bytes.NewReader(c.body))
		if c.contentType != "" {
			r.Header.Set("Content-Type", c.contentType)
		}
		if c.encoding != "" {
			r.Header.Set("Content-Encoding", c.encoding)
		}
		w := beginWith(t, h, r, fmt.Sprintf("hostile-%d", i))
		require.Equal(t, c.status, w.Code, "case %d: %q %s", i, c.body[:min(len(c.body), 40)], w.Body.String())
		if w.Code == http.StatusCreated {
			continue
		}
		require.Equal(t, "application/problem+json", w.Header().Get("Content-Type"))
		var pb struct{ Type, Title, Detail string }
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &pb))
		for _, text := range []string{pb.Title, pb.Detail} {
			for _, pkg := range []string{"canon", "httpcore", "redisstore"} {
				require.NotContains(t, strings.ToLower(text), pkg, "case %d: %q", i, c.body[:min(len(c.body), 40)])
			}
		}
		if c.detail != "" {
			require.Contains(t, pb.Detail, c.detail, "case %d", i)
		}
	}
}

// BenchmarkFingerprint fingerprints request bodies of the usual kinds.
func BenchmarkFingerprint(b *testing.B) {
	h := &Guard{o: Config{IgnoreFields: []string{"client_timestamp"}}.withDefaults()}
	small := []byte(`{"amount":12950,"currency":"EUR","customer":"cus_9f8e7d6c5b4a","description":"Order 1234","metadata":{"order_id":"1234","source":"web"}}`)
	doc := []byte(`{
  "customer": {"id": "cus_9f8e7d6c5b4a", "email": "jane.doe@example.com", "name": "Jane Doe",
    "address": {"line1": "12 Rue de l'\u00c9glise", "city": "Paris", "postal_code": "75004", "country": "FR"}},
  "amount": 129.90, "currency": "EUR", "client_timestamp": "2024-05-17T10:21:33.123Z",
  "items": [
    {"sku": "SKU-1001", "name": "Coffee beans 1kg", "quantity": 2, "unit_price": 24.50, "tags": ["food", "coffee"]},
    {"sku": "SKU-2040", "name": "Ceramic mug", "quantity": 1, "unit_price": 12.00, "tags": ["kitchen"]}
  ],
  "shipping": {"method": "express", "price": 0, "eta_days": 2, "tracking": null},
  "payment": {"type": "card", "card": {"brand": "visa", "last4": "4242", "exp_month": 12, "exp_year": 2027}, "3ds": true}
}`)
	var mp bytes.Buffer
	mw := multipart.NewWriter(&mp)
	_ = mw.WriteField("note", "hello")
	fw, _ := mw.CreateFormFile("doc", "a.txt")
	_, _ = fw.Write(bytes.Repeat([]byte("x"), 1000))
	_ = mw.Close()
	for _, bc := range []struct {
		name string
		ct   string
		body []byte
	}{
		{"empty", "", nil},
		{"JSON 141 B", "application/json", small},
		{"JSON 1 KiB", "application/json", doc},
		{"JSON 1 MiB", "application/json", largeJSON(1 << 20)},
		{"text 1 KiB", "text/plain", bytes.Repeat([]byte("t"), 1024)},
		{"bytes 1 MiB", "application/octet-stream", bytes.Repeat([]byte("b"), 1<<20)},
		{"multipart 1 KiB", mw.FormDataContentType(), mp.Bytes()},
	} {
		b.Run(bc.name, func(b *testing.B) {
			r := httptest.NewRequest(http.MethodPost, "/orders?x=1", nil)
			if bc.ct != "" {
				r.Header.Set("Content-Type", bc.ct)
			}
			b.SetBytes(int64(len(bc.body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, p := h.fingerprint(r, bc.body); p != nil {
					b.Fatal(p.detail)
				}
			}
		})
	}
}

// FuzzFingerprintForm fingerprints arbitrary bodies as multipart/form-data:
// never a problem or a panic, the same fingerprint twice, and a body that
// is not fingerprinted by its parts is fingerprinted as its bytes.
func FuzzFingerprintForm(f *testing.F) {
	h := &Guard{o: Config{}.withDefaults()}
	for _, q := range []fpRequest{
		form(f, "b", part{name: "a", content: "1", noFilename: true}, part{name: "f", filename: "x.txt", contentType: "text/plain", content: "hi"}),
		form(f, "b"),
	} {
		f.Add(q.body, "b")
	}
	f.Add([]byte("--b\nContent-Transfer-Encoding: base64\n\nQQ==\n--b--"), "b")
	f.Add([]byte("--b\r\nContent-Disposition: form-data; name*=utf-8''%e2%82%ac\r\n\r\nx\r\n--b--\r\n"), "b")
	f.Fuzz(func(t *testing.T, body []byte, boundary string) {
		r := httptest.NewRequest(http.MethodPost, "/", nil)
		r.Header.Set("Content-Type", mime.FormatMediaType("multipart/form-data", map[string]string{"boundary": boundary}))
		a, p := h.fingerprint(r, body)
		require.Nil(t, p)
		b, _ := h.fingerprint(r, body)
		require.Equal(t, a, b)
		r.Header.Set("Content-Type", "text/plain")
		raw, _ := h.fingerprint(r, body)
		s := fpPool.Get().(*fpState)
		defer fpPool.Put(s)
		if boundary == "" || len(body) == 0 || !s.writeForm(io.Discard, body, boundary) {
			require.Equal(t, raw, a)
		}
	})
}
