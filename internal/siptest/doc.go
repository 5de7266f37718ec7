// Package siptest provides real SIP endpoints for tests of the call path: a
// measuring carrier (UAS) that records when each INVITE arrives, and a
// small caller (UAC). Both are built on sipgo and listen on loopback.
//
// It is also the one home of what every measurement of the call path
// needs, shared by the product's tests (sip, e2e) and the benchmark suite
// (bench/, a module of its own in this repository): kernel receive
// timestamps of UDP datagrams (EnableTimestamps, ReadStamped) and "at most
// N in any rolling window" (MaxInWindow).
//
// Failure: an endpoint that cannot be set up (a listener, its sipgo user
// agent, a listener not ready within 5 s) fails the test (t.Fatalf), as
// does WriteRaw when it cannot send; nothing here skips. What the code under
// test does wrong is left to the test to see: Caller.Final returns nil when
// the transaction ends without a final answer or ctx ends, and a Carrier
// only records (Arrivals, Count, Invites). A Carrier fails on purpose when
// asked: any Answer code, ringing until CANCEL, or Silence (a dead host).
// Off Linux EnableTimestamps returns errors.ErrUnsupported, and ReadStamped
// gives the local clock after the read whenever the kernel gave no time.
//
// A Carrier is safe for concurrent use; it stops when the test ends.
package siptest
