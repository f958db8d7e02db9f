package hop

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Kind is what a hop forwards.
type Kind string

const (
	// HTTP is a hop that forwards HTTP requests to an upstream URL
	// (--proxy): it can add latency, answer a share of the requests with
	// an error status, and refuse connections.
	HTTP Kind = "http"
	// TCP is a hop that forwards a TCP stream to an upstream address
	// (--tcp-proxy), for Redis or anything that is not HTTP: it can add
	// latency and refuse connections.
	TCP Kind = "tcp"
)

// DefaultStatus is the status an HTTP hop answers a window's errors with
// when the fault names none.
const DefaultStatus = 503

// maxNameLen bounds a hop's name.
const maxNameLen = 64

// Spec is one hop as the command line gives it: --proxy
// NAME=LISTEN,UPSTREAM or --tcp-proxy NAME=LISTEN,ADDR.
type Spec struct {
	// Name names the hop in --fault and in the report: letters, digits,
	// '-', '_' and '.', at most 64.
	Name string
	// Kind is HTTP or TCP.
	Kind Kind
	// Listen is the loopback address the hop listens on, host:port; the
	// host is 127.0.0.1 when the flag gave none, and port 0 picks a free
	// one (Hop.Addr tells which).
	Listen string
	// Upstream is where the hop forwards to: an http or https URL for an
	// HTTP hop (its path is prefixed to every request's), host:port for a
	// TCP hop.
	Upstream string
}

// String returns the spec as the flag writes it: NAME=LISTEN,UPSTREAM.
func (s Spec) String() string { return s.Name + "=" + s.Listen + "," + s.Upstream }

// ParseProxy parses the value of --proxy: NAME=LISTEN,UPSTREAM, where
// LISTEN is a loopback host:port (":8081" means 127.0.0.1:8081) and
// UPSTREAM an http or https URL. It returns an error that quotes the value
// and says what is wrong with it.
func ParseProxy(s string) (Spec, error) { return parseSpec(s, HTTP) }

// ParseTCPProxy parses the value of --tcp-proxy: NAME=LISTEN,ADDR, where
// LISTEN is a loopback host:port and ADDR the upstream's host:port. It
// returns an error that quotes the value and says what is wrong with it.
func ParseTCPProxy(s string) (Spec, error) { return parseSpec(s, TCP) }

func parseSpec(s string, kind Kind) (Spec, error) {
	flag, want := "--proxy", "NAME=LISTEN,UPSTREAM (provider=127.0.0.1:9001,http://127.0.0.1:8081)"
	if kind == TCP {
		flag, want = "--tcp-proxy", "NAME=LISTEN,ADDR (redis=127.0.0.1:7001,127.0.0.1:6379)"
	}
	bad := func(format string, a ...any) (Spec, error) {
		return Spec{}, fmt.Errorf("%s %q: %s", flag, s, fmt.Sprintf(format, a...))
	}
	name, rest, ok := strings.Cut(strings.TrimSpace(s), "=")
	if !ok {
		return bad("want %s", want)
	}
	if err := checkName(name); err != nil {
		return bad("%v", err)
	}
	listen, upstream, ok := strings.Cut(rest, ",")
	if !ok {
		return bad("want %s: no comma between the listen address and the upstream", want)
	}
	listen, upstream = strings.TrimSpace(listen), strings.TrimSpace(upstream)
	listen, err := loopbackAddr(listen)
	if err != nil {
		return bad("listen address: %v", err)
	}
	spec := Spec{Name: name, Kind: kind, Listen: listen, Upstream: upstream}
	if kind == HTTP {
		u, err := url.Parse(upstream)
		switch {
		case err != nil && !strings.Contains(upstream, "://"):
			return bad("upstream %q: want an http:// or https:// URL", upstream)
		case err != nil:
			return bad("upstream: %v", err)
		case u.Scheme != "http" && u.Scheme != "https":
			return bad("upstream %q: want an http:// or https:// URL", upstream)
		case u.Host == "":
			return bad("upstream %q: no host", upstream)
		case u.RawQuery != "" || u.Fragment != "":
			return bad("upstream %q: a query or fragment cannot be forwarded to; give the scheme, host and an optional path", upstream)
		}
		return spec, nil
	}
	host, port, err := net.SplitHostPort(upstream)
	if err != nil || host == "" {
		return bad("upstream %q: want host:port", upstream)
	}
	if _, err := parsePort(port); err != nil || port == "0" {
		return bad("upstream %q: bad port", upstream)
	}
	return spec, nil
}

// checkName reports what is wrong with a hop's name, or nil.
func checkName(name string) error {
	if name == "" {
		return errors.New("empty hop name")
	}
	if len(name) > maxNameLen {
		return fmt.Errorf("hop name longer than %d characters", maxNameLen)
	}
	for _, c := range name {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return fmt.Errorf("hop name %q: use letters, digits, '-', '_' and '.'", name)
		}
	}
	return nil
}

// loopbackAddr checks a listen address and returns it with an empty host
// made 127.0.0.1: a hop listens on loopback only.
func loopbackAddr(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("%q: want host:port", addr)
	}
	if _, err := parsePort(port); err != nil {
		return "", fmt.Errorf("%q: bad port", addr)
	}
	switch host {
	case "":
		host = "127.0.0.1"
	case "localhost":
	default:
		ip, err := netip.ParseAddr(host)
		if err != nil || !ip.IsLoopback() {
			return "", fmt.Errorf("%q: a hop listens on loopback only (127.0.0.1, ::1 or localhost)", addr)
		}
	}
	return net.JoinHostPort(host, port), nil
}

func parsePort(p string) (uint16, error) {
	n, err := strconv.ParseUint(p, 10, 16)
	return uint16(n), err
}

// Window is one window of a hop's fault schedule: from At to At+For after
// the run's start, the hop adds Latency (or a uniform draw between Latency
// and LatencyMax), answers a share Errors of the requests with Status
// without forwarding them (HTTP only), or, Down, refuses connections.
type Window struct {
	// At is when the window opens, from the run's start.
	At time.Duration
	// For is how long it stays open; positive.
	For time.Duration
	// Latency is the delay added to each request (HTTP: before it is
	// forwarded; TCP: to each write from the client before it reaches the
	// upstream), or the low end of a range.
	Latency time.Duration
	// LatencyMax, when above Latency, makes the delay a uniform draw in
	// [Latency, LatencyMax]; 0 or equal to Latency means a fixed delay.
	LatencyMax time.Duration
	// Errors is the share of the requests, in (0, 1], that an HTTP hop
	// answers with Status instead of forwarding; 0 for none. The share is
	// exact and spread evenly (with 25 %, every fourth request of the
	// window), not drawn at random.
	Errors float64
	// Status is the status of those answers: DefaultStatus (503) when
	// Errors is set and the fault named none.
	Status int
	// Down refuses the connections made in the window (the hop accepts and
	// resets them at once) and resets the open ones at their next byte.
	Down bool
}

// End returns when the window closes, from the run's start: At+For.
func (w Window) End() time.Duration { return w.At + w.For }

// String returns the window as --fault writes it, without the hop's
// name: "at=5s for=10s latency=100ms..300ms errors=50%:503".
func (w Window) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "at=%s for=%s", w.At, w.For)
	if w.Latency > 0 || w.LatencyMax > 0 {
		fmt.Fprintf(&b, " latency=%s", w.Latency)
		if w.LatencyMax > w.Latency {
			fmt.Fprintf(&b, "..%s", w.LatencyMax)
		}
	}
	if w.Errors > 0 {
		fmt.Fprintf(&b, " errors=%s%%", strconv.FormatFloat(w.Errors*100, 'f', -1, 64))
		if w.Status != DefaultStatus && w.Status != 0 {
			fmt.Fprintf(&b, ":%d", w.Status)
		}
	}
	if w.Down {
		b.WriteString(" down")
	}
	return b.String()
}

// errorBasisPoints returns Errors in hundredths of a percent, the unit in
// which the share is applied, so that it is exact.
func (w Window) errorBasisPoints() int64 { return int64(math.Round(w.Errors * 10000)) }

// check reports what is wrong with a window on a hop of kind, or nil.
func (w Window) check(kind Kind) error {
	switch {
	case w.At < 0:
		return errors.New("at= must not be negative")
	case w.For <= 0:
		return errors.New("for= must be positive")
	case w.Latency < 0 || w.LatencyMax < 0:
		return errors.New("latency must not be negative")
	case w.LatencyMax != 0 && w.LatencyMax < w.Latency:
		return fmt.Errorf("latency=%s..%s: the range is upside down", w.Latency, w.LatencyMax)
	case w.Errors < 0 || w.Errors > 1 || math.IsNaN(w.Errors):
		return errors.New("errors= must be a share from 0.01% to 100%")
	case w.Errors > 0 && w.errorBasisPoints() == 0:
		return errors.New("errors= below 0.01% does nothing")
	case w.Status != 0 && (w.Status < 200 || w.Status > 599):
		return fmt.Errorf("status %d: want 200 to 599", w.Status)
	case w.Down && (w.Latency > 0 || w.LatencyMax > 0 || w.Errors > 0):
		return errors.New("down refuses every connection: latency and errors would have nothing to act on; give them a window of their own")
	case !w.Down && w.Latency == 0 && w.LatencyMax == 0 && w.Errors == 0:
		return errors.New("the window does nothing: give latency=, errors= or down")
	case kind == TCP && w.Errors > 0:
		return errors.New("errors= needs an HTTP hop (--proxy): a TCP hop takes latency= and down")
	}
	return nil
}

// Fault is one --fault: a window of the named hop's schedule.
type Fault struct {
	// Hop is the name of the hop the window belongs to.
	Hop string
	Window
}

// String returns the fault as --fault writes it: "NAME at=D for=D …".
func (f Fault) String() string { return f.Hop + " " + f.Window.String() }

// ParseFault parses the value of --fault:
//
//	NAME at=D for=D [latency=D[..D]] [errors=P%[:STATUS]] [down]
//
// D is a Go duration ("5s", "1m30s", "250ms"); P a percentage from 0.01
// to 100, with up to two decimals; STATUS 200 to 599 (503 by default).
// The window must do something (latency, errors or down), and down stands
// alone. Whether the hop exists, is of the right kind and has no other
// window at the same time is checked when the hops are opened (Open). It
// returns an error that quotes the value and says what is wrong with it.
func ParseFault(s string) (Fault, error) {
	bad := func(format string, a ...any) (Fault, error) {
		return Fault{}, fmt.Errorf("--fault %q: %s", s, fmt.Sprintf(format, a...))
	}
	fields := strings.Fields(s)
	if len(fields) == 0 {
		return bad("want NAME at=D for=D [latency=D[..D]] [errors=P%%[:STATUS]] [down]")
	}
	f := Fault{Hop: fields[0]}
	if strings.Contains(f.Hop, "=") {
		return bad("start with the hop's name, then at=D for=D ...")
	}
	if err := checkName(f.Hop); err != nil {
		return bad("%v", err)
	}
	seen := map[string]bool{}
	for _, field := range fields[1:] {
		key, val, hasVal := strings.Cut(field, "=")
		if seen[key] {
			return bad("%s given twice", key)
		}
		seen[key] = true
		if key == "down" {
			if hasVal {
				return bad("down takes no value")
			}
			f.Down = true
			continue
		}
		if !hasVal || val == "" {
			return bad("%q: want key=value (at, for, latency, errors) or down", field)
		}
		var err error
		switch key {
		case "at":
			f.At, err = parseDuration(val)
		case "for":
			f.For, err = parseDuration(val)
		case "latency":
			lo, hi, isRange := strings.Cut(val, "..")
			if f.Latency, err = parseDuration(lo); err == nil && isRange {
				f.LatencyMax, err = parseDuration(hi)
			}
		case "errors":
			f.Errors, f.Status, err = parseErrors(val)
		default:
			return bad("unknown %q: want at, for, latency, errors or down", key)
		}
		if err != nil {
			return bad("%s=%s: %v", key, val, err)
		}
	}
	switch {
	case !seen["at"]:
		return bad("at=D is missing (when the window opens, from the run's start)")
	case !seen["for"]:
		return bad("for=D is missing (how long the window stays open)")
	}
	if f.Errors > 0 && f.Status == 0 {
		f.Status = DefaultStatus
	}
	if f.LatencyMax == f.Latency {
		f.LatencyMax = 0
	}
	if err := f.check(""); err != nil {
		return bad("%v", err)
	}
	return f, nil
}

// parseDuration parses a Go duration, with a clearer error for a number
// without its unit.
func parseDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		if _, nerr := strconv.ParseFloat(s, 64); nerr == nil {
			return 0, fmt.Errorf("missing unit (%ss, %sms)", s, s)
		}
		return 0, errors.New("want a duration such as 5s, 250ms or 1m30s")
	}
	return d, nil
}

// parseErrors parses P%[:STATUS].
func parseErrors(s string) (share float64, status int, err error) {
	p, st, hasStatus := strings.Cut(s, ":")
	num, ok := strings.CutSuffix(p, "%")
	if !ok {
		return 0, 0, errors.New("want a percentage, such as 50% or 12.5%:500")
	}
	if whole, frac, _ := strings.Cut(num, "."); len(frac) > 2 || whole == "" {
		return 0, 0, errors.New("want a percentage from 0.01% to 100%, with up to two decimals")
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || v <= 0 || v > 100 {
		return 0, 0, errors.New("want a percentage from 0.01% to 100%")
	}
	if hasStatus {
		n, err := strconv.Atoi(st)
		if err != nil || n < 200 || n > 599 {
			return 0, 0, fmt.Errorf("status %q: want 200 to 599", st)
		}
		status = n
	}
	return v / 100, status, nil
}
