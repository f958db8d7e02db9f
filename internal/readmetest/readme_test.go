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
	gin.SetMode(gin.TestMode)
	ginQuickStart(context.Background(), gin.New()) // builds the route; no Redis call

	mr := miniredis.RunT(t)
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

// TestLinksResolve: every relative link in the repository's Markdown names a
// file that exists.
func TestLinksResolve(t *testing.T) {
	var docs []string
	for _, pattern := range []string{"*.md", "docs/*.md", "cmd/idemkey/*.md", "examples/*/*.md", "bench/*.md", "prometheus/*.md", "otel/*.md", "grpcmw/*.md"} {
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
