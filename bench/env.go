package bench

import (
	"bufio"
	"context"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Env describes where and with what a run was made.
type Env struct {
	Date         string `json:"date"`
	Command      string `json:"command"`
	CPU          string `json:"cpu"`
	NumCPU       int    `json:"num_cpu"`
	GOMAXPROCS   int    `json:"gomaxprocs"`
	Memory       string `json:"memory"`
	Kernel       string `json:"kernel"`
	GoVersion    string `json:"go_version"`
	RedisVersion string `json:"redis_version"`
	Gin          string `json:"gin"`
	GoRedis      string `json:"go_redis"`
	// LoadBefore and LoadAfter are /proc/loadavg's 1-minute figure when
	// the run started and ended: above the core count, something else was
	// competing for the machine.
	LoadBefore string `json:"load_before"`
	LoadAfter  string `json:"load_after"`
}

func newEnv(command string) Env {
	e := Env{
		Date:       time.Now().UTC().Format("2006-01-02 15:04 UTC"),
		Command:    command,
		NumCPU:     runtime.NumCPU(),
		GOMAXPROCS: runtime.GOMAXPROCS(0),
		GoVersion:  runtime.Version(),
		Gin:        moduleVersion("github.com/gin-gonic/gin"),
		GoRedis:    moduleVersion("github.com/redis/go-redis/v9"),
		LoadBefore: loadAvg(),
		CPU:        procField("/proc/cpuinfo", "model name"),
		Memory:     memTotal(),
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		e.Kernel = runtime.GOOS + " " + strings.TrimSpace(string(b))
	} else {
		e.Kernel = runtime.GOOS
	}
	e.Kernel += "/" + runtime.GOARCH
	return e
}

// procField returns the value of the first "name: value" line of a /proc file.
func procField(path, name string) string {
	f, err := os.Open(path)
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == name {
			return strings.Join(strings.Fields(v), " ")
		}
	}
	return "unknown"
}

// memTotal returns the machine's memory in GiB, from /proc/meminfo.
func memTotal() string {
	v := procField("/proc/meminfo", "MemTotal") // "24684092 kB"
	kb, err := strconv.ParseFloat(strings.TrimSuffix(v, " kB"), 64)
	if err != nil {
		return v
	}
	return strconv.FormatFloat(kb/(1<<20), 'f', 1, 64) + " GiB"
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	if f := strings.Fields(string(b)); len(f) > 0 {
		return f[0]
	}
	return "unknown"
}

func moduleVersion(mod string) string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	for _, d := range bi.Deps {
		if d.Path == mod {
			return d.Version
		}
	}
	return "unknown"
}

func redisVersion(ctx context.Context, c redis.UniversalClient) string {
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return "unknown"
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v
		}
	}
	return "unknown"
}
