// Package sipbench holds the SIP endpoints of the benchmark suite: a
// measuring carrier (Sink, a UDP UAS) and a paced caller (Caller, a UDP
// UAC). Both speak just enough SIP over UDP to complete calls through a
// proxy (INVITE, 100, 200, ACK, BYE; non-2xx finals are ACKed) and record
// kernel receive timestamps, so a run measures the proxy and not the tools.
//
// They are benchmark tools, not SIP stacks: no TCP, no authentication, no
// SDP; loopback only. Both are safe for concurrent use once started.
//
// Failure: NewSink and RunCaller return an error only when they cannot
// start: an address that does not resolve, a socket that cannot be opened,
// or (RunCaller) a Rate or Count not above 0. What goes wrong on the wire
// is data, not an error: a call with no final answer by the end of Linger
// is a CallRecord with Code 0 (CallerStats.NoFinal); when ctx ends,
// RunCaller stops sending and returns the records of the calls it sent.
// The Sink counts what it cannot use in SinkStats (Unparsable, responses)
// and answers a BYE of an unknown call 481. Off Linux, or when the kernel
// gives no timestamp, an arrival time is the time of the read.
package sipbench
