package redisstore

import "strconv"

// Status says what a successful claim found.
type Status int

// The outcomes of a successful claim. The Lua reply codes they come from are
// in internal/record/reply.go.
const (
	// Claimed: the key was free. Run the operation with Claim.Lease.
	Claimed Status = iota + 1
	// TookOver: an earlier attempt ended without an outcome: its lease ran
	// out (it crashed or stalled), or it gave the key back after it may have
	// done part of the work. Run the operation with Claim.Lease, resuming
	// from its RecoveryPoint and reconciling with what Attempt says ran.
	TookOver
	// Replayed: the operation completed before. Claim.Response is its outcome.
	Replayed
)

// String returns "claimed", "took over" or "replayed".
func (s Status) String() string {
	if Claimed <= s && s <= Replayed {
		return [...]string{"claimed", "took over", "replayed"}[s-Claimed]
	}
	return "Status(" + strconv.Itoa(int(s)) + ")"
}

// Response is a stored outcome, replayed byte for byte.
type Response struct {
	// Code is an application-defined status, such as an HTTP status code.
	Code int
	// Body is the outcome's bytes. [Lease.Complete] does not keep it: the
	// caller may reuse the slice once Complete returns. In a Replayed
	// [Claim], read it and do not modify it: it is shared with concurrent
	// claims of the key in this process, and with Options.ReplayCacheBytes
	// with every later replay of the key.
	Body []byte
}

// Claim is the result of a successful [Store.Claim].
type Claim struct {
	// Status says what the claim found.
	Status Status
	// Lease is the caller's hold on the record when Status is Claimed or
	// TookOver; nil when Replayed.
	Lease *Lease
	// Response is the stored outcome when Status is Replayed.
	Response Response
}
