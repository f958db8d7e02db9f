package readmetest

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/redisstore"
)

const root = "../.."

// snippets returns the regions of the Go files here, by name.
func snippets(t *testing.T) map[string]string {
	t.Helper()
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	re := regexp.MustCompile(`(?s)// README:begin (\w+)\n(.*?)\n// README:end`)
	out := map[string]string{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, m := range re.FindAllStringSubmatch(string(b), -1) {
			out[m[1]] = strings.TrimSpace(m[2])
		}
	}
	return out
}

// TestReadmeSnippetsCompile: every Go block of the README is one of the
// snippets here, which compile with the package, and every snippet is shown.
func TestReadmeSnippetsCompile(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	blocks := regexp.MustCompile("(?s)```go\n(.*?)```").FindAllStringSubmatch(string(readme), -1)
	require.NotEmpty(t, blocks)
	snips := snippets(t)
	shown := map[string]bool{}
	for _, b := range blocks {
		block := strings.TrimSpace(b[1])
		found := ""
		for name, s := range snips {
			if s == block {
				found = name
			}
		}
		require.NotEmpty(t, found, "a README Go block is not a compiled snippet of internal/readmetest:\n%s", block)
		shown[found] = true
	}
	for name := range snips {
		require.True(t, shown[name], "snippet %q is not in the README", name)
	}
}

// TestSnippetsRun runs the snippets against an embedded Redis, so that they
// do what the README says, not only compile.
func TestSnippetsRun(t *testing.T) {
	mr := miniredis.RunT(t)
	t.Run("gin", func(t *testing.T) { testGinQuickStart(t, mr) })

	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	store, err := redisstore.New(rdb, redisstore.Options{})
	require.NoError(t, err)

	mux := netHTTPQuickStart(store, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) })
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/v1/orders", strings.NewReader(`{}`))
	require.NoError(t, err)
	req.Header.Set("Idempotency-Key", "k1")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusCreated, resp.StatusCode)

	handle(context.Background(), store, message{ID: "m1"})
	clientQuickStart(srv.URL + "/v1/orders")
	t.Run("kit", TestCreateOrder)
}

// testGinQuickStart sends the Gin quick start, on mr, a keyed payment, its
// retry and a reuse of its key for another payment: one charge, the retry
// gets the first answer replayed byte for byte, the reuse a 422 problem.
func testGinQuickStart(t *testing.T, mr *miniredis.Miniredis) {
	t.Setenv("REDIS_ADDR", mr.Addr())
	gin.SetMode(gin.TestMode)
	stopping, stop := context.WithCancel(context.Background())
	t.Cleanup(stop)
	r := gin.New()
	r.Use(func(c *gin.Context) { c.Set("user_id", "alice") }) // the app's authentication, mounted first
	ginQuickStart(stopping, r)
	before := provider.Charges()

	send := func(body string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, "/v1/payments", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "pay-1")
		w := httptest.NewRecorder()
		r.ServeHTTP(w, req)
		return w
	}
	first := send(`{"amount":1200}`)
	require.Equal(t, http.StatusCreated, first.Code, first.Body.String())
	require.Regexp(t, `^/v1/payments/ch_\d+$`, first.Header().Get("Location"))
	require.JSONEq(t, `{"ID":"`+strings.TrimPrefix(first.Header().Get("Location"), "/v1/payments/")+`"}`, first.Body.String())
	require.Empty(t, first.Header().Get("Idempotent-Replayed"))

	retry := send(`{"amount":1200}`)
	require.Equal(t, http.StatusCreated, retry.Code)
	require.Equal(t, "true", retry.Header().Get("Idempotent-Replayed"))
	require.Equal(t, first.Header().Get("Location"), retry.Header().Get("Location"))
	require.Equal(t, first.Body.String(), retry.Body.String(), "replayed byte for byte")

	reuse := send(`{"amount":9900}`)
	require.Equal(t, http.StatusUnprocessableEntity, reuse.Code)
	require.Equal(t, "application/problem+json", reuse.Header().Get("Content-Type"))
	require.Contains(t, reuse.Body.String(), "key-reused")

	charged := 0
	for key, n := range provider.Charges() {
		charged += n - before[key]
	}
	require.Equal(t, 1, charged, "charges made: three requests, one payment")
}

// TestLinksResolve: every relative link in the repository's Markdown names a
// file that exists.
func TestLinksResolve(t *testing.T) {
	var docs []string
	for _, pattern := range []string{"*.md", "docs/*.md", "cmd/idemkey/*.md", "examples/*/*.md", "bench/*.md", "prometheus/*.md", "otel/*.md", "grpcmw/*.md", "mcpmw/*.md", "storm/*.md"} {
		m, err := filepath.Glob(filepath.Join(root, pattern))
		require.NoError(t, err)
		docs = append(docs, m...)
	}
	require.NotEmpty(t, docs)
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	for _, doc := range docs {
		b, err := os.ReadFile(doc)
		require.NoError(t, err)
		// Links inside fenced code are code, not links.
		text := regexp.MustCompile("(?s)```.*?```").ReplaceAllString(string(b), "")
		for _, m := range link.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "#") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			target, _, _ = strings.Cut(target, "#")
			path := filepath.Join(filepath.Dir(doc), target)
			_, err := os.Stat(path)
			require.NoError(t, err, "%s links to %s, which does not exist", doc, m[1])
		}
	}
}

// TestAutoPipelineTextIsTrue: the README's prose cannot be compiled, so its
// mentions of the auto-pipeliner are held to what compiles (AutoPipeline
// returns the pipeliner and an error), and docs/pipelining.md names the
// README's quick starts among those that opt in only if a snippet does.
func TestAutoPipelineTextIsTrue(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	prose := regexp.MustCompile("(?s)```.*?```").ReplaceAllString(string(readme), "")
	spans := regexp.MustCompile("`[^`]*AutoPipeline\\(\\)[^`]*`").FindAllString(prose, -1)
	require.NotEmpty(t, spans, "the README no longer mentions the auto-pipeliner: drop this test")
	for _, s := range spans {
		require.Regexp(t, `^`+"`"+`\w+, err := \w+\.AutoPipeline\(\)`+"`"+`$`, s, "AutoPipeline returns two values")
	}

	doc, err := os.ReadFile(filepath.Join(root, "docs", "pipelining.md"))
	require.NoError(t, err)
	row := regexp.MustCompile(`(?m)^\| auto-pipelining .*$`).Find(doc)
	require.NotNil(t, row)
	snippetsPipeline := false
	for _, s := range snippets(t) {
		snippetsPipeline = snippetsPipeline || strings.Contains(s, "AutoPipeline(")
	}
	claims := regexp.MustCompile(`quick starts? (opt in|do\b)|Gin quick start`).Match(row) &&
		!strings.Contains(string(row), "quick starts do not")
	require.Equal(t, snippetsPipeline, claims, "docs/pipelining.md says of the README's quick starts: %s", row)
}
