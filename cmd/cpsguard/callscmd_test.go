package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cpsguard/cpsguard/internal/siptest"
	"github.com/cpsguard/cpsguard/records"
)

// A real node with a records file: a call through it is listed by
// `cpsguard calls` (filters apply), `cpsguard calls end` needs the token
// and ends it (a BYE reaches the caller and the carrier), and its record
// is in the file.
func TestCallsCommand(t *testing.T) {
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	recFile := filepath.Join(t.TempDir(), "calls.jsonl")
	addr, _, sipAddr := startNodeEdit(t, func(b []byte) []byte {
		b = bytes.ReplaceAll(b, []byte(`uri: "sip:127.0.0.1:5070"`), []byte(`uri: "sip:`+car.Addr+`"`))
		return bytes.ReplaceAll(b, []byte(`uri: "sip:127.0.0.1:5071;transport=tcp"`), []byte(`uri: "sip:`+car.Addr+`"`))
	}, "CPSGUARD_HTTP_TOKEN=t0ken", "CPSGUARD_RECORDS_FILE="+recFile)
	waitFor(t, "the node to answer", func() bool {
		return cpsguard(t, nil, "probe", "--addr", addr).code == 0
	})
	// 127.0.0.2 is peer dialer-2 (customer initech, route premium).
	caller := siptest.StartCaller(t, "127.0.0.2")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	inv := caller.Invite(sipAddr)
	if res := caller.Final(ctx, inv); res == nil || res.StatusCode != 200 {
		t.Fatalf("call through the node: got %v, want 200", res)
	}
	id := inv.CallID().Value()

	var r result
	waitFor(t, "the call listed", func() bool {
		r = cpsguard(t, nil, "calls", "--addr", addr)
		return r.code == 0 && strings.Contains(r.stdout, id)
	})
	if !strings.Contains(r.stdout, "dialer-2") || !strings.Contains(r.stdout, "initech") || !strings.Contains(r.stdout, "example-1") ||
		!strings.Contains(r.stdout, "1 live call(s)") {
		t.Errorf("calls:\n%s", r.stdout)
	}
	t.Logf("$ cpsguard calls\n%s", r.stdout)
	if r := cpsguard(t, nil, "calls", "--peer", "dialer-1", "--addr", addr); r.code != 0 || !strings.Contains(r.stdout, "0 live call(s)") {
		t.Errorf("calls --peer dialer-1: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// A misspelt peer is an error that says so, its name escaped.
	if r := cpsguard(t, nil, "calls", "--peer", "dialer-9\x1b[2J", "--addr", addr); r.code != 1 ||
		!strings.Contains(r.stderr, `404: no live call, and no peer named "dialer-9\x1b[2J"`) || strings.Contains(r.stderr, "\x1b") {
		t.Errorf("calls --peer unknown: exit %d, stderr %q; want 1 and a 404 naming it escaped", r.code, r.stderr)
	}
	if r := cpsguard(t, nil, "calls", "end", id, "--addr", addr); r.code != 1 || !strings.Contains(r.stderr, "401") {
		t.Errorf("end without token: exit %d, stderr %q; want 1 and 401", r.code, r.stderr)
	}
	r = cpsguard(t, []string{"CPSGUARD_HTTP_TOKEN=t0ken"}, "calls", "end", id, "--addr", addr)
	if r.code != 0 || !strings.Contains(r.stdout, "ended 1 call(s)") {
		t.Fatalf("end: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	t.Logf("$ cpsguard calls end %s\n%s", id, r.stdout)
	waitFor(t, "a BYE at the caller and at the carrier", func() bool { return len(caller.Byes()) == 1 && car.Count("BYE") == 1 })
	if r := cpsguard(t, []string{"CPSGUARD_HTTP_TOKEN=t0ken"}, "calls", "end", id, "--addr", addr); r.code != 1 || !strings.Contains(r.stderr, "404") {
		t.Errorf("end of an ended call: exit %d, stderr %q; want 1 and 404", r.code, r.stderr)
	}
	if r := cpsguard(t, nil, "calls", "end"); r.code != 2 {
		t.Errorf("end without a Call-ID: exit %d, want 2", r.code)
	}

	var rec records.Record
	waitFor(t, "the call's record in records.file", func() bool {
		f, err := os.Open(recFile)
		if err != nil {
			return false
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if json.Unmarshal(sc.Bytes(), &rec) == nil && rec.CallID == id {
				return true
			}
		}
		return false
	})
	if rec.EndedBy != records.ByNode || rec.EndReason != records.EndOperator || rec.Peer != "dialer-2" || rec.Node != "example-1" || rec.Carrier != "carrier-b" {
		t.Errorf("record: %+v", rec)
	}
}
