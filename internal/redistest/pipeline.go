package redistest

import (
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"
)

// AutoPipeline returns client's auto-pipeliner: the one instance go-redis
// keeps per *redis.Client or *redis.ClusterClient, closed with the client.
func AutoPipeline(client redis.UniversalClient) (*redis.AutoPipeliner, error) {
	var (
		ap  *redis.AutoPipeliner
		err error
	)
	switch c := client.(type) {
	case *redis.Client:
		ap, err = c.AutoPipeline()
	case *redis.ClusterClient:
		ap, err = c.AutoPipeline()
	default:
		return nil, fmt.Errorf("no auto-pipeliner on %T", client)
	}
	if err != nil {
		return nil, fmt.Errorf("auto-pipeliner: %w", err)
	}
	return ap, nil
}

// AutoPipeliner is AutoPipeline for a test: it fails the test when there is
// none, and closes the pipeliner when the test ends (before a client closed
// by an earlier cleanup).
func AutoPipeliner(t testing.TB, client redis.UniversalClient) *redis.AutoPipeliner {
	t.Helper()
	ap, err := AutoPipeline(client)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ap.Close() })
	return ap
}
