package storm

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// The incident's flags of idemkey storm: --proxy, --tcp-proxy, --fault,
// --at, --retry-policy and --max-recovery.

// listFlag is a repeatable flag whose values are kept as given.
type listFlag []string

func (f *listFlag) String() string { return strings.Join(*f, " ") }

func (f *listFlag) Set(s string) error {
	if strings.TrimSpace(s) == "" {
		return errors.New("empty value")
	}
	*f = append(*f, s)
	return nil
}

// policiesFlag is --retry-policy P[,P…], repeatable.
type policiesFlag []string

func (f *policiesFlag) String() string { return strings.Join(*f, ",") }

func (f *policiesFlag) Set(s string) error {
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			return fmt.Errorf("%q: want P[,P...], such as naive,budget", s)
		}
		*f = append(*f, p)
	}
	return nil
}

// incidentFlagSet holds the incident's flags once parsed.
type incidentFlagSet struct {
	proxies, tcpProxies, faults, at listFlag
	policies                        policiesFlag
	maxRecovery                     *time.Duration
}

// incidentFlags registers the incident's flags on fs.
func incidentFlags(fs *flag.FlagSet) *incidentFlagSet {
	f := &incidentFlagSet{}
	fs.Var(&f.proxies, "proxy", "run an HTTP fault hop `NAME=LISTEN,UPSTREAM` on the loopback address LISTEN, forwarding to the URL UPSTREAM; the service calls its dependency through it (repeatable)")
	fs.Var(&f.tcpProxies, "tcp-proxy", "run a TCP fault hop `NAME=LISTEN,ADDR` (Redis, or anything not HTTP) (repeatable)")
	fs.Var(&f.faults, "fault", "a window of a hop: `'NAME at=D for=D [latency=D[..D]] [errors=P%[:STATUS]] [down]'`, from the run's start (repeatable)")
	fs.Var(&f.at, "at", "run the shell command at time D of the run, its exit status and duration recorded: `D=COMMAND` (repeatable)")
	fs.Var(&f.policies, "retry-policy", "load mode: the clients' retry `P[,P...]` (backoff, naive, budget, token-bucket, adaptive); several run as arms, in turn, on the same schedule (default backoff)")
	f.maxRecovery = fs.Duration("max-recovery", 0, "load mode threshold, with --fault or --at: the time from the last trigger's end until goodput and p99 are back to the baseline's, at most this (not recovered breaks it)")
	return f
}

// apply puts the flags' values in cfg.
func (f *incidentFlagSet) apply(cfg *Config) {
	cfg.Proxies, cfg.TCPProxies, cfg.Faults, cfg.At = f.proxies, f.tcpProxies, f.faults, f.at
	cfg.RetryPolicies, cfg.MaxRecovery = f.policies, *f.maxRecovery
}

// armFiles are the history files of several arms: FILE with the policy
// before its extension (storm.jsonl: storm.naive.jsonl, storm.budget.jsonl).
type armFiles struct {
	files map[string]*os.File
}

// armHistories creates an arm's history file for each policy.
func armHistories(path string, policies []string) (*armFiles, error) {
	a := &armFiles{files: map[string]*os.File{}}
	ext := filepath.Ext(path)
	for _, p := range policies {
		f, err := os.Create(strings.TrimSuffix(path, ext) + "." + p + ext)
		if err != nil {
			a.close()
			return nil, err
		}
		a.files[p] = f
	}
	return a, nil
}

func (a *armFiles) writer(policy string) io.Writer {
	if f, ok := a.files[policy]; ok {
		return f
	}
	return nil
}

func (a *armFiles) close() {
	for _, f := range a.files {
		_ = f.Close()
	}
}
