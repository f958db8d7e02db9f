package devredis

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/internal/redistest"
)

func TestOpen(t *testing.T) {
	ping := func(t *testing.T, url, wantWhere string) {
		client, where, closeAll, err := Open(url)
		require.NoError(t, err)
		defer closeAll()
		require.Contains(t, where, wantWhere)
		require.NoError(t, client.Ping(context.Background()).Err())
	}
	t.Run("embedded", func(t *testing.T) { ping(t, "", "embedded miniredis at redis://127.0.0.1:") })
	t.Run("url", func(t *testing.T) {
		url := "redis://" + redistest.Start(t).Addr() + "/0"
		ping(t, url, url)
	})
}

func TestOpenFailsFast(t *testing.T) {
	_, _, _, err := Open("redis://127.0.0.1:1/0")
	require.ErrorContains(t, err, "redis at 127.0.0.1:1")
	_, _, _, err = Open("http://nope")
	require.ErrorContains(t, err, "redis URL")
}
