package faulttest

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// quiet drops go-redis's own log lines: these tests kill servers on purpose.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func init() { redis.SetLogger(quiet{}) }
