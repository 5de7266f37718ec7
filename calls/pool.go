package calls

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"time"
)

// Pool lists and ends the live calls of a pool for the operations API
// (GET and DELETE /api/v1/calls): the Registry lists every node's calls;
// a call is ended by the node that holds it, which alone has its dialog
// (this node through End, another through its end queue, which Run
// polls).
//
// A Pool is safe for concurrent use once built.
type Pool struct {
	// Registry is the pool's list of live calls and end queues.
	Registry Registry
	// Node is this node's node_id.
	Node string
	// Local lists this node's own calls (Tracker.List), shown when the
	// Registry cannot be read; nil: nothing then.
	Local func() []Live
	// End ends this node's live calls of a Call-ID and returns how many
	// (sip.Proxy.EndCalls).
	End func(ctx context.Context, callID string) int
	// Logger receives failed polls of the end queue; nil: discarded.
	Logger *slog.Logger
}

// Filter selects live calls; an empty field matches every call.
type Filter struct {
	Peer, Carrier string
}

func (f Filter) match(l Live) bool {
	return (f.Peer == "" || l.Peer == f.Peer) && (f.Carrier == "" || l.Carrier == f.Carrier)
}

// Listing is the answer to List.
type Listing struct {
	// Calls are the live calls that match, oldest first.
	Calls []Live
	// Partial is set when the Registry could not be read: Calls are then
	// this node's only, and Error says why.
	Partial bool
	Error   string
}

// List returns the pool's live calls that match f, oldest first.
func (p *Pool) List(ctx context.Context, f Filter) Listing {
	all, err := p.Registry.List(ctx)
	out := Listing{Calls: []Live{}}
	if err != nil {
		out.Partial, out.Error = true, err.Error()
		if p.Local != nil {
			all = p.Local()
		}
	}
	for _, l := range all {
		if f.match(l) {
			out.Calls = append(out.Calls, l)
		}
	}
	slices.SortStableFunc(out.Calls, func(a, b Live) int { return a.StartedAt.Compare(b.StartedAt) })
	return out
}

// ErrNoCall reports a Call-ID no live call of the pool has.
var ErrNoCall = errors.New("calls: no live call with that Call-ID")

// EndResult is the answer to EndCall.
type EndResult struct {
	// CallID is the Call-ID asked for.
	CallID string `json:"call_id"`
	// Ended counts this node's calls of CallID that it ended (BYE to both
	// legs once answered, else 503 to the caller and CANCEL to the
	// carrier).
	Ended int `json:"ended"`
	// Requested names the other nodes asked to end their calls of CallID
	// (through their end queues; each polls its queue every second).
	Requested []string `json:"requested,omitempty"`
	// Pending names the nodes of Requested whose calls were still listed
	// when EndCall stopped waiting (a node that is down: its calls leave
	// the list within the TTL).
	Pending []string `json:"pending,omitempty"`
	// Error says what could not be done (the Registry could not be read:
	// only this node's calls were ended).
	Error string `json:"error,omitempty"`
}

// How EndCall waits for other nodes to end their calls, and how often they
// poll their end queues.
var (
	endWait      = 3 * time.Second
	endPoll      = 200 * time.Millisecond
	endQueuePoll = time.Second
)

// EndCall ends the pool's live calls of callID: this node's at once,
// another node's by asking it, and waits up to 3 s for those to leave the
// list. It returns ErrNoCall when no node lists a call of callID; another
// error when the Registry failed and this node had no such call.
//
// callID may be given in full or as the list shows it (ClipCallID): the
// calls of the same clipped Call-ID are ended.
func (p *Pool) EndCall(ctx context.Context, callID string) (EndResult, error) {
	res := EndResult{CallID: callID}
	if callID == "" {
		return res, ErrNoCall
	}
	callID = ClipCallID(callID)
	if p.End != nil {
		res.Ended = p.End(ctx, callID)
	}
	remote, err := p.remoteNodes(ctx, callID)
	if err != nil {
		if res.Ended > 0 {
			res.Error = "other nodes not asked: " + err.Error()
			return res, nil
		}
		return res, err
	}
	for _, n := range remote {
		if err := p.Registry.RequestEnd(ctx, n, callID); err != nil {
			res.Pending = append(res.Pending, n)
			res.Error = "node " + n + " not asked: " + err.Error()
			continue
		}
		res.Requested = append(res.Requested, n)
	}
	if res.Ended == 0 && len(remote) == 0 {
		return res, ErrNoCall
	}
	if len(res.Requested) == 0 {
		return res, nil
	}
	wait, cancel := context.WithTimeout(ctx, endWait)
	defer cancel()
	t := time.NewTicker(endPoll)
	defer t.Stop()
	for {
		left, err := p.remoteNodes(wait, callID)
		if err == nil {
			left = slices.DeleteFunc(left, func(n string) bool { return !slices.Contains(res.Requested, n) })
			if len(left) == 0 {
				return res, nil
			}
		}
		select {
		case <-wait.Done():
			if err == nil {
				res.Pending = append(res.Pending, left...)
			} else {
				res.Pending = append(res.Pending, res.Requested...)
			}
			return res, nil
		case <-t.C:
		}
	}
}

// remoteNodes lists the other nodes that list a live call of callID.
func (p *Pool) remoteNodes(ctx context.Context, callID string) ([]string, error) {
	all, err := p.Registry.List(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, l := range all {
		if l.CallID == callID && l.Node != p.Node && !slices.Contains(out, l.Node) {
			out = append(out, l.Node)
		}
	}
	return out, nil
}

// Run ends the calls other nodes ask this node to end (its end queue,
// polled every second) until ctx is done.
func (p *Pool) Run(ctx context.Context) {
	log := p.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	t := time.NewTicker(endQueuePoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		ids, err := p.Registry.TakeEnds(ctx, p.Node)
		if err != nil {
			log.Debug("reading this node's end queue failed", "error", err)
			continue
		}
		for _, id := range ids {
			n := 0
			if p.End != nil {
				n = p.End(ctx, id)
			}
			log.Info("calls ended at another node's request", "call_id", id, "calls", n)
		}
	}
}
