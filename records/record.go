package records

import "time"

// Who ended a call (Record.EndedBy).
const (
	// ByCaller: the caller hung up (its BYE, or its CANCEL before an answer).
	ByCaller = "caller"
	// ByCallee: the callee or its carrier ended the call (its BYE, or its
	// final answer other than 2xx).
	ByCallee = "callee"
	// ByNode: cpsguard ended it (a refusal, max_call_duration, an
	// operator's DELETE /api/v1/calls, the node's shutdown).
	ByNode = "node"
)

// Why a call ended (Record.EndReason).
const (
	// EndAnswer: the call was never answered; its final answer ended it.
	EndAnswer = "final_answer"
	// EndCancel: the caller cancelled the call before it was answered.
	EndCancel = "cancel"
	// EndBye: a BYE ended the answered call.
	EndBye = "bye"
	// EndMaxDuration: the answered call reached sip.max_call_duration; the
	// node stopped supervising it (it sends no BYE).
	EndMaxDuration = "max_call_duration"
	// EndOperator: an operator ended the call (DELETE /api/v1/calls/ID);
	// both legs got a BYE from the node.
	EndOperator = "operator"
	// EndShutdown: the node stopped while the call was up; the call may go
	// on between its ends, unsupervised.
	EndShutdown = "shutdown"
	// EndUnsupervised: the call was answered but the node is not in its
	// path (sip.record_route false), so it cannot see it end: the record
	// is written at the answer (ended_at = answered_at, duration 0).
	EndUnsupervised = "unsupervised"
)

// Record is one call's record, one JSON object. Times are UTC with
// millisecond precision; a time that did not happen is null.
type Record struct {
	// CallID is the call's SIP Call-ID (at most 256 bytes; longer ones are
	// cut and end in "…").
	CallID string `json:"call_id"`
	// Node is the node_id of the node that handled the call.
	Node string `json:"node"`
	// Peer is the peer that sent the call ("unknown" for a stranger).
	Peer string `json:"peer"`
	// Customer is the call's customer, "" when none.
	Customer string `json:"customer"`
	// Source is the INVITE's packet source, ip:port.
	Source string `json:"source"`
	// FromUser and ToUser are the user parts of From and To (the calling
	// and called numbers; at most 128 bytes each).
	FromUser string `json:"from_user"`
	ToUser   string `json:"to_user"`
	// CarriersTried lists, in order, the carriers the INVITE was sent to
	// (a carrier skipped as down, full or out of slots is not tried; the
	// reason and detail say why it was skipped).
	CarriersTried []string `json:"carriers_tried"`
	// Carrier is the carrier whose final answer ended the setup (the one
	// that answered, or the last one tried), "" when none was tried.
	Carrier string `json:"carrier"`
	// Code is the final SIP status the caller got (200 for an answered
	// call); 0 when none was sent (a call dropped in silence).
	Code int `json:"code"`
	// Outcome is the call's cpsguard_calls_total outcome (forwarded,
	// rejected_cps, canceled, …).
	Outcome string `json:"outcome"`
	// Reason and Detail are the event line's (log.events): why the call
	// was refused or rerouted, and the carriers it went past; "" when it
	// was forwarded on its first try.
	Reason string `json:"reason"`
	Detail string `json:"detail"`
	// AdmissionWaitMS is the time the admission and max_calls store calls
	// took.
	AdmissionWaitMS int64 `json:"admission_wait_ms"`
	// PacingWaitMS is the time the call waited for carrier send slots, all
	// carriers together.
	PacingWaitMS int64 `json:"pacing_wait_ms"`
	// SetupMS is the time from the INVITE sent to Carrier to its first
	// provisional answer above 100 or its final answer (post-dial delay,
	// as cpsguard_carrier_setup_seconds); null when no carrier answered.
	SetupMS *int64 `json:"setup_ms"`
	// StartedAt is when the INVITE arrived.
	StartedAt time.Time `json:"started_at"`
	// AnsweredAt is when the carrier's 2xx was relayed to the caller.
	AnsweredAt *time.Time `json:"answered_at"`
	// EndedAt is when the call ended (its final answer, or its end after
	// an answer).
	EndedAt time.Time `json:"ended_at"`
	// DurationS is EndedAt minus AnsweredAt in seconds (millisecond
	// precision); 0 for a call never answered.
	DurationS float64 `json:"duration_s"`
	// EndedBy is who ended the call: caller, callee or node.
	EndedBy string `json:"ended_by"`
	// EndReason is how: final_answer, cancel, bye, max_call_duration,
	// operator, shutdown, unsupervised.
	EndReason string `json:"end_reason"`
	// Priority reports a priority call (never refused by limits).
	Priority bool `json:"priority"`
}

// Stamp is t as records write it: UTC, milliseconds.
func Stamp(t time.Time) time.Time { return t.UTC().Truncate(time.Millisecond) }

// Finish sets EndedAt and, for an answered call, DurationS.
func (r *Record) Finish(ended time.Time) {
	r.EndedAt = Stamp(ended)
	if r.AnsweredAt != nil {
		d := r.EndedAt.Sub(*r.AnsweredAt)
		r.DurationS = float64(d.Milliseconds()) / 1000
	}
}
