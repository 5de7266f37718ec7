package sip

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"

	callplaces "github.com/cpsguard/cpsguard/calls"
	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/internal/siptest"
	"github.com/cpsguard/cpsguard/records"
	"github.com/cpsguard/cpsguard/sip/internal/msgpart"
)

// recordsProxy starts a proxy whose records go to a JSON-lines file (the
// real sink), on a Tracker that lists its calls in reg.
func recordsProxy(t *testing.T, cfg *config.Config) (h *harness, read func() []records.Record, tr *callplaces.Tracker, reg *callplaces.LocalRegistry) {
	t.Helper()
	adm, _ := newFakes()
	return recordsProxyOn(t, cfg, adm)
}

// recordsProxyOn is recordsProxy deciding admission with adm.
func recordsProxyOn(t *testing.T, cfg *config.Config, adm Admitter) (h *harness, read func() []records.Record, tr *callplaces.Tracker, reg *callplaces.LocalRegistry) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "calls.jsonl")
	w := records.New(records.Options{})
	if err := w.Apply(config.Records{File: path, MaxSizeMB: 10, Buffer: 1024}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	reg = callplaces.NewLocalRegistry(nil)
	tr = callplaces.NewTracker(callplaces.NewLocalStore(nil), callplaces.TrackerOptions{TTL: time.Minute, Registry: reg})
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); tr.Run(runCtx) }()
	t.Cleanup(func() { stop(); <-done })
	if cfg.NodeID == "" {
		cfg.NodeID = "node-a"
	}
	_, pacer := newFakes()
	h = startProxyOpts(t, Options{Config: func() *config.Config { return cfg }, Admission: adm, Pacer: pacer, Calls: tr, Records: w})
	read = func() []records.Record {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		var out []records.Record
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var r records.Record
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				t.Fatalf("record %q: %v", sc.Text(), err)
			}
			out = append(out, r)
		}
		return out
	}
	return h, read, tr, reg
}

// recordOf waits for the record of callID and checks there is one only.
func recordOf(t *testing.T, read func() []records.Record, callID string) records.Record {
	t.Helper()
	var got []records.Record
	waitFor(t, func() bool {
		got = got[:0]
		for _, r := range read() {
			if r.CallID == callID {
				got = append(got, r)
			}
		}
		return len(got) > 0
	}, "the record of "+callID)
	// A second record would come from another end path: give it the time
	// the first one took to show.
	time.Sleep(100 * time.Millisecond)
	got = got[:0]
	for _, r := range read() {
		if r.CallID == callID {
			got = append(got, r)
		}
	}
	if len(got) != 1 {
		t.Fatalf("records of %s: got %d, want 1: %+v", callID, len(got), got)
	}
	return got[0]
}

// An answered call hung up by either side leaves one record, written when
// the BYE passed, with who hung up; its times are in order.
func TestRecordsAnsweredCallHungUpByEachSide(t *testing.T) {
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	h, read, tr, _ := recordsProxy(t, testConfig(carrierCfg("a", car)))
	caller := siptest.StartCaller(t, "127.0.0.2")
	// The callee's BYE comes from the carrier's own address (the leg
	// check compares IP and port).
	carSide := car.Caller(t)

	for _, side := range []string{records.ByCaller, records.ByCallee} {
		t.Run(side, func(t *testing.T) {
			ok := answeredCall(t, caller, h.udp)
			id := msgpart.CallID(ok)
			waitFor(t, func() bool { return len(tr.Find(id)) == 1 }, "the call tracked")
			// Not written while the call is up.
			time.Sleep(50 * time.Millisecond)
			for _, r := range read() {
				if r.CallID == id {
					t.Fatalf("record written before the call ended: %+v", r)
				}
			}
			var bye *sipmsg.Request
			var from *siptest.Caller
			if side == records.ByCaller {
				bye, from = inDialogOf(t, caller, h.udp, ok, sipmsg.BYE), caller
			} else {
				bye, from = calleeBye(t, carSide, h.udp, ok), carSide
			}
			if res := from.Final(ctxT(t, 5*time.Second), bye); res == nil || res.StatusCode != 200 {
				t.Fatalf("BYE: got %v, want 200", res)
			}
			r := recordOf(t, read, id)
			if r.EndedBy != side || r.EndReason != records.EndBye {
				t.Errorf("ended_by %q end_reason %q, want %q bye", r.EndedBy, r.EndReason, side)
			}
			if r.Peer != "dialer-1" || r.Customer != "acme" || r.Node != "node-a" || r.Carrier != "a" ||
				!slices.Equal(r.CarriersTried, []string{"a"}) || r.Code != 200 || r.Outcome != "forwarded" || r.Priority {
				t.Errorf("record fields: %+v", r)
			}
			if r.AnsweredAt == nil || r.SetupMS == nil || *r.SetupMS < 0 || r.AdmissionWaitMS < 0 || r.PacingWaitMS < 0 {
				t.Fatalf("answered_at %v setup_ms %v waits %d/%d", r.AnsweredAt, r.SetupMS, r.AdmissionWaitMS, r.PacingWaitMS)
			}
			if r.StartedAt.After(*r.AnsweredAt) || r.AnsweredAt.After(r.EndedAt) {
				t.Errorf("times out of order: started %v answered %v ended %v", r.StartedAt, r.AnsweredAt, r.EndedAt)
			}
			if want := float64(r.EndedAt.Sub(*r.AnsweredAt).Milliseconds()) / 1000; r.DurationS != want {
				t.Errorf("duration_s %v, want %v", r.DurationS, want)
			}
			if r.ToUser != "100" || r.Source == "" {
				t.Errorf("to_user %q source %q", r.ToUser, r.Source)
			}
			waitFor(t, func() bool { return tr.Live() == 0 }, "the call no longer tracked")
		})
	}
}

// Calls that never were answered leave one record when their final
// answer is sent: refused by the node, failed at the carrier, cancelled.
func TestRecordsUnansweredCalls(t *testing.T) {
	var mu sync.Mutex
	answer := siptest.Answer{Code: 486}
	car := siptest.StartCarrier(t, "127.0.0.1", func(*sipmsg.Request) siptest.Answer {
		mu.Lock()
		defer mu.Unlock()
		return answer
	})
	h, read, tr, reg := recordsProxy(t, testConfig(carrierCfg("a", car)))
	caller := siptest.StartCaller(t, "127.0.0.2")

	// Refused by the node before any carrier: an unknown customer.
	inv := caller.Invite(h.udp, "X-Customer: nobody")
	if res := caller.Final(ctxT(t, 5*time.Second), inv); res == nil || res.StatusCode != 403 {
		t.Fatalf("unknown customer: got %v, want 403", res)
	}
	r := recordOf(t, read, msgpart.CallID(inv))
	if r.Code != 403 || r.Outcome != "rejected_forbidden" || r.Reason != "customer_not_allowed" || r.EndedBy != records.ByNode ||
		r.EndReason != records.EndAnswer || len(r.CarriersTried) != 0 || r.Carrier != "" || r.AnsweredAt != nil || r.SetupMS != nil {
		t.Errorf("refused call's record: %+v", r)
	}

	// The carrier's 486, relayed: the callee ended it.
	inv = caller.Invite(h.udp)
	if res := caller.Final(ctxT(t, 5*time.Second), inv); res == nil || res.StatusCode != 486 {
		t.Fatalf("busy: got %v, want 486", res)
	}
	r = recordOf(t, read, msgpart.CallID(inv))
	if r.Code != 486 || r.EndedBy != records.ByCallee || r.Carrier != "a" || !slices.Equal(r.CarriersTried, []string{"a"}) ||
		r.SetupMS == nil || r.AnsweredAt != nil || r.DurationS != 0 {
		t.Errorf("busy call's record: %+v", r)
	}

	// Cancelled while ringing: the caller ended it.
	mu.Lock()
	answer = siptest.Answer{Ring: -1}
	mu.Unlock()
	inv = caller.Invite(h.udp)
	tx, err := caller.Transaction(ctxT(t, 5*time.Second), inv)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Terminate()
	for res := range tx.Responses() {
		if res.StatusCode == 180 {
			break
		}
	}
	// Ringing, the call is listed for the pool (not answered yet).
	waitFor(t, func() bool {
		ls, _ := reg.List(t.Context())
		return len(ls) == 1 && ls[0].CallID == msgpart.CallID(inv) && ls[0].AnsweredAt == nil && ls[0].Carrier == "a"
	}, "the ringing call listed")
	if res := caller.Final(ctxT(t, 5*time.Second), siptest.CancelFor(inv)); res == nil || res.StatusCode != 200 {
		t.Fatalf("CANCEL: got %v", res)
	}
	r = recordOf(t, read, msgpart.CallID(inv))
	if r.Code != 487 || r.EndedBy != records.ByCaller || r.EndReason != records.EndCancel {
		t.Errorf("cancelled call's record: %+v", r)
	}
	waitFor(t, func() bool {
		ls, _ := reg.List(t.Context())
		return len(ls) == 0 && tr.Live() == 0
	}, "no call listed once it ended")
}

// Without sip.record_route the node is not in the dialog's path and never
// sees the BYE: an answered call's record is written at the answer (end
// reason unsupervised) and the call is not kept as live.
func TestRecordsUnsupervisedWithoutRecordRoute(t *testing.T) {
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	cfg := testConfig(carrierCfg("a", car))
	cfg.SIP.RecordRoute = false
	h, read, tr, _ := recordsProxy(t, cfg)
	caller := siptest.StartCaller(t, "127.0.0.2")
	inv := caller.Invite(h.udp)
	if res := caller.Final(ctxT(t, 5*time.Second), inv); res == nil || res.StatusCode != 200 {
		t.Fatalf("call: got %v, want 200", res)
	}
	r := recordOf(t, read, msgpart.CallID(inv))
	if r.Code != 200 || r.AnsweredAt == nil || !r.EndedAt.Equal(*r.AnsweredAt) || r.DurationS != 0 ||
		r.EndedBy != records.ByNode || r.EndReason != records.EndUnsupervised {
		t.Errorf("record: %+v", r)
	}
	waitFor(t, func() bool { return tr.Live() == 0 }, "the call not kept")
}
