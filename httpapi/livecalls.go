package httpapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cpsguard/cpsguard/calls"
)

// PathCalls lists the pool's live calls (GET, ?peer=&carrier=); DELETE on
// PathCalls/{call_id} ends the calls of one Call-ID.
const PathCalls = "/api/v1/calls"

// LiveCalls lists and ends the pool's live calls. *calls.Pool satisfies it.
type LiveCalls interface {
	// List returns the live calls that match f, oldest first (partial,
	// with an error, when only this node's could be read).
	List(ctx context.Context, f calls.Filter) calls.Listing
	// EndCall ends the live calls of callID wherever they are;
	// calls.ErrNoCall when there is none.
	EndCall(ctx context.Context, callID string) (calls.EndResult, error)
}

// CallList is the JSON answer of GET /api/v1/calls.
type CallList struct {
	// Calls are the live calls of the pool that match the filters, oldest
	// first: forwarded to a carrier and not ended (answered_at null while
	// ringing).
	Calls []calls.Live `json:"calls"`
	// Partial is true when the pool's list could not be read: Calls are
	// the answering node's only, and Error says why.
	Partial bool   `json:"partial"`
	Error   string `json:"error,omitempty"`
}

// callsTimeout bounds the store reads of one calls request (ending a
// call on another node waits up to 3 s for it).
const callsTimeout = 10 * time.Second

// callsList answers GET /api/v1/calls. It reads and copies the whole
// list of the pool (and, with the store down, the node's own table under
// its lock) and encodes it, so one runs at a time: a request while another
// runs gets 429 with Retry-After 1, and repeated requests (the API reads
// need no token) cost the node and the store no more than one listing at
// once. The answer is written after: a client slow to read it (up to the
// server's WriteTimeout) holds no other listing up.
func (s *server) callsList(w http.ResponseWriter, r *http.Request) {
	if s.o.LiveCalls == nil {
		writeError(w, &Error{Code: http.StatusNotImplemented, Message: "live calls are not available on this node"})
		return
	}
	if !s.listing.TryLock() {
		w.Header().Set("Retry-After", "1")
		writeError(w, &Error{Code: http.StatusTooManyRequests, Message: "another listing of the live calls is running: try again in a second"})
		return
	}
	q := r.URL.Query()
	flt := calls.Filter{Peer: q.Get("peer"), Carrier: q.Get("carrier")}
	var unknown string
	body := func() []byte {
		defer s.listing.Unlock()
		ctx, cancel := context.WithTimeout(r.Context(), callsTimeout)
		defer cancel()
		l := s.o.LiveCalls.List(ctx, flt)
		if len(l.Calls) == 0 && !l.Partial {
			unknown = s.unknownFilter(flt)
		}
		return encodeJSON(CallList{Calls: l.Calls, Partial: l.Partial, Error: l.Error})
	}()
	if unknown != "" {
		writeError(w, &Error{Code: http.StatusNotFound, Message: "no live call, and " + unknown})
		return
	}
	writeJSONBody(w, http.StatusOK, body)
}

// unknownFilter names the filter's peer or carrier when the configuration
// has none of that name ("" when both are known or not given): a listing
// filtered by a misspelt name would otherwise answer an empty list, which
// reads as "no call" (h68). A peer or carrier removed by a reload whose
// calls are still live is listed as before.
func (s *server) unknownFilter(f calls.Filter) string {
	cfg := s.o.Config()
	if cfg == nil {
		return ""
	}
	if f.Peer != "" && cfg.Peer(f.Peer) == nil {
		return fmt.Sprintf("no peer named %q in the configuration", f.Peer)
	}
	if f.Carrier != "" && cfg.Carrier(f.Carrier) == nil {
		return fmt.Sprintf("no carrier named %q in the configuration", f.Carrier)
	}
	return ""
}

func (s *server) callsEnd(w http.ResponseWriter, r *http.Request) {
	if !s.authorize(w, r, "end call") {
		return
	}
	if s.o.LiveCalls == nil {
		writeError(w, &Error{Code: http.StatusNotImplemented, Message: "live calls are not available on this node"})
		return
	}
	id := r.PathValue("call_id")
	ctx, cancel := context.WithTimeout(r.Context(), callsTimeout)
	defer cancel()
	res, err := s.o.LiveCalls.EndCall(ctx, id)
	switch {
	case errors.Is(err, calls.ErrNoCall):
		writeError(w, &Error{Code: http.StatusNotFound, Message: fmt.Sprintf("no live call with Call-ID %q", id)})
		return
	case err != nil:
		writeError(w, &Error{Code: http.StatusServiceUnavailable, Message: "the pool's live calls cannot be read: " + err.Error()})
		return
	}
	s.o.Logger.Info("call ended by an operator", "remote", r.RemoteAddr, "call_id", id,
		"ended_here", res.Ended, "requested", strings.Join(res.Requested, ","), "pending", strings.Join(res.Pending, ","))
	writeJSON(w, http.StatusOK, res)
}

// callPath is the path of one Call-ID's calls.
func callPath(callID string) string { return PathCalls + "/" + url.PathEscape(callID) }

// FetchCalls gets GET /api/v1/calls (filtered by peer and carrier when
// not empty) from the node at base.
func FetchCalls(ctx context.Context, base, peer, carrier string) (CallList, error) {
	q := url.Values{}
	if peer != "" {
		q.Set("peer", peer)
	}
	if carrier != "" {
		q.Set("carrier", carrier)
	}
	path := PathCalls
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var l CallList
	err := call(ctx, http.MethodGet, base, path, "", nil, &l)
	return l, err
}

// EndCall sends DELETE /api/v1/calls/{call_id} with the bearer token
// (empty: none) to the node at base.
func EndCall(ctx context.Context, base, token, callID string) (calls.EndResult, error) {
	var res calls.EndResult
	err := call(ctx, http.MethodDelete, base, callPath(callID), token, nil, &res)
	return res, err
}

// RenderCalls writes l as a table: one live call a line, with its age
// and, once answered, how long it has been up, at now.
func RenderCalls(w io.Writer, l CallList, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CALL-ID\tPEER\tCUSTOMER\tCARRIER\tNODE\tSTARTED\tANSWERED\tUP")
	for _, c := range l.Calls {
		answered, up := "-", "-"
		if c.AnsweredAt != nil {
			answered = c.AnsweredAt.UTC().Format(time.RFC3339)
			up = now.Sub(*c.AnsweredAt).Round(time.Second).String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", terminalSafe(c.CallID), dash(c.Peer), dash(c.Customer), dash(c.Carrier),
			c.Node, c.StartedAt.UTC().Format(time.RFC3339), answered, up)
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "%d live call(s)", len(l.Calls))
	if l.Partial {
		fmt.Fprintf(w, " on this node only (the pool's list could not be read: %s)", l.Error)
	}
	fmt.Fprintln(w)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// terminalSafe replaces control characters of a Call-ID (a peer's choice)
// before it reaches a terminal.
func terminalSafe(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return '?'
		}
		return r
	}, s)
}
