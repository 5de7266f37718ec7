package oc

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"
)

var ocSeqForm = regexp.MustCompile(`^[0-9]{1,12}\.[0-9]{3}$`)

// parsedVia is the top Via of a response holding s, as sipgo parses it.
func parsedVia(t *testing.T, s string) *sipmsg.ViaHeader {
	t.Helper()
	msg, err := sipmsg.ParseMessage([]byte("SIP/2.0 200 OK\r\nVia: " + s + "\r\nCSeq: 2 BYE\r\nContent-Length: 0\r\n\r\n"))
	if err != nil {
		t.Fatal(err)
	}
	return msg.Via()
}

// TestMeterFollowsShedding: the reduction starts at 0, follows the share
// of shed calls on top of the reduction already asked, halves in a period
// without a shed and once more per period without any INVITE, and its
// oc-seq strictly increases, also when the clock steps back.
func TestMeterFollowsShedding(t *testing.T) {
	var m Meter
	t0 := time.Unix(1764013000, 0)
	v := m.Current(t0)
	if v.Percent != 0 || v.oc != "0" || !ocSeqForm.MatchString(v.seq) {
		t.Fatalf("first value %+v, want 0 with a valid oc-seq", v)
	}
	seqs := []string{v.seq}
	step := func(at time.Time, taken, shed uint64, want int) {
		t.Helper()
		m.taken.Add(taken)
		m.shed.Add(shed)
		v := m.Current(at)
		if v.Percent != want {
			t.Fatalf("at +%v after %d taken, %d shed: reduction %d, want %d", at.Sub(t0), taken, shed, v.Percent, want)
		}
		seqs = append(seqs, v.seq)
	}
	// Within the period nothing changes, whatever was counted.
	step(t0.Add(100*time.Millisecond), 10, 90, 0)
	// Period over: 10 of 100 let in, so 90 % to drop.
	step(t0.Add(Period), 0, 0, 90)
	// The clients dropped 90 %, yet half of what came was still shed:
	// 1-v' = 0.1·0.5.
	step(t0.Add(2*Period), 5, 5, 95)
	// A period with no shed halves it.
	step(t0.Add(3*Period), 20, 0, 47)
	// Three more silent periods in one gap: halved for each.
	step(t0.Add(6*Period), 0, 0, 5)
	// All shed: everything goes.
	step(t0.Add(7*Period), 0, 3, 100)
	// Sheds counted just after an update, then a quiet gap: they are the
	// gap's first period's, and each period after it halves the value.
	step(t0.Add(7*Period+20*Period), 10, 90, 0)
	// Shedding again after the gap (AddShed recomputes before it counts,
	// so the shed lands in the new period) counts in full.
	again := t0.Add(27*Period + 3*Period)
	if v := m.Current(again); v.Percent != 0 {
		t.Fatalf("after the gap: reduction %d, want 0", v.Percent)
	}
	step(again.Add(Period), 0, 1, 100)
	for i := 1; i < len(seqs); i++ {
		a, _ := strconv.ParseFloat(seqs[i-1], 64)
		b, _ := strconv.ParseFloat(seqs[i], 64)
		if seqs[i] != seqs[i-1] && b <= a {
			t.Fatalf("oc-seq went from %s to %s", seqs[i-1], seqs[i])
		}
		if !ocSeqForm.MatchString(seqs[i]) {
			t.Fatalf("oc-seq %q is not 1*12DIGIT \".\" 3DIGIT", seqs[i])
		}
	}
	// The clock steps back by a minute: the next oc-seq still increases.
	last := m.cur.Load().seq
	m.mu.Lock()
	m.update(t0.Add(-time.Minute))
	m.mu.Unlock()
	a, _ := strconv.ParseFloat(last, 64)
	b, _ := strconv.ParseFloat(m.cur.Load().seq, 64)
	if b <= a {
		t.Fatalf("oc-seq after the clock stepped back: %s after %s", m.cur.Load().seq, last)
	}
}

// TestMarkReplacesParams: a response to a client that asked gets the
// node's four parameters in place of whatever oc parameters its Via held
// (the client's valueless oc, sipgo's mangled parse of a quoted oc-algo,
// values a carrier wrote), other parameters untouched; a response to a
// client that did not ask is left as it is.
func TestMarkReplacesParams(t *testing.T) {
	var meter Meter
	raw := "SIP/2.0/UDP 127.0.0.2:5060;branch=z9hG4bK1;rport=5060;OC;oc-algo=\"loss\";oc-validity=99999;received=127.0.0.2"
	msg := "SIP/2.0 180 Ringing\r\nVia: " + raw + "\r\nFrom: <sip:a@b>;tag=1\r\nTo: <sip:1@c>;tag=2\r\nCall-ID: x\r\nCSeq: 1 INVITE\r\nContent-Length: 0\r\n\r\n"
	m, err := sipmsg.ParseMessage([]byte(msg))
	if err != nil {
		t.Fatal(err)
	}
	via := m.(*sipmsg.Response).Via()
	if !Asked(via) {
		t.Fatal("a Via with OC does not ask")
	}
	Mark(meter.Current(time.Now()), via)
	got := via.Value()
	want := regexp.MustCompile(`^SIP/2\.0/UDP 127\.0\.0\.2:5060;branch=z9hG4bK1;rport=5060;received=127\.0\.0\.2;oc=0;oc-validity=1000;oc-seq=[0-9]+\.[0-9]{3};oc-algo="loss"$`)
	if !want.MatchString(got) {
		t.Fatalf("marked Via %q", got)
	}
	plain := &sipmsg.ViaHeader{ProtocolName: "SIP", ProtocolVersion: "2.0", Transport: "UDP", Host: "127.0.0.2", Port: 5060,
		Params: sipmsg.HeaderParams{{K: "branch", V: "z9hG4bK2"}, {K: "oc", V: "100"}}}
	before := plain.Value()
	Mark(nil, plain)
	if plain.Value() != before {
		t.Fatalf("a Via whose client did not ask was changed: %q to %q", before, plain.Value())
	}
	if Asked(&sipmsg.ViaHeader{Params: sipmsg.HeaderParams{{K: "branch", V: "z9hG4bK3"}, {K: "occ", V: ""}, {K: "oc-algo", V: `"loss"`}}}) {
		t.Fatal("a Via without an oc parameter asks")
	}
	if Asked(nil) {
		t.Fatal("no Via asks")
	}
}

// TestValuesOnlyTheNodes: values a party downstream wrote into the
// client's Via never reach the client, even hidden behind a quoted
// parameter sipgo mangles; a client that asked after a quoted parameter
// or with blanks around the name is still seen asking; the stateless
// relay's ocStrip keeps only a client's valueless oc, and leaves a Via
// without oc parameters untouched.
func TestValuesOnlyTheNodes(t *testing.T) {
	var meter Meter
	forged := `SIP/2.0/UDP 127.0.0.2:5060;branch=z9hG4bK1;oc;x="a";oc=100;oc-seq=999999999999.99999;oc-validity=86400000;rport`
	via := parsedVia(t, forged)
	if !Asked(via) {
		t.Fatalf("%q does not ask", forged)
	}
	Mark(meter.Current(time.Now()), via)
	got := via.Value()
	if strings.Count(got, ";oc=") != 1 || strings.Contains(got, "99999") || strings.Contains(got, "86400000") || !strings.Contains(got, `;x="a"`) {
		t.Fatalf("marked %q: %q", forged, got)
	}
	if oc, _ := via.Params.Get("oc"); oc != "0" {
		t.Fatalf("marked %q: oc %q, want the node's 0", forged, oc)
	}

	for _, v := range []string{
		`SIP/2.0/UDP 127.0.0.2:5060;branch=z9hG4bK1;x="a";oc`,
		`SIP/2.0/UDP 127.0.0.2:5060;branch=z9hG4bK1;oc-algo="loss";oc`,
	} {
		if !Asked(parsedVia(t, v)) {
			t.Errorf("%q does not ask", v)
		}
	}
	if !Asked(&sipmsg.ViaHeader{Params: sipmsg.HeaderParams{{K: " OC ", V: ""}}}) {
		t.Error("an oc with blanks around it does not ask")
	}

	strip := parsedVia(t, forged)
	Strip(strip)
	if got := strip.Value(); strings.Contains(got, "oc=") || strings.Contains(got, "oc-") || !strings.Contains(got, ";oc") {
		t.Fatalf("stripped %q: %q, want the valueless oc alone", forged, got)
	}
	injected := parsedVia(t, "SIP/2.0/UDP 127.0.0.2:5060;branch=z9hG4bK1;oc-validity=86400000")
	Strip(injected)
	if got := injected.Value(); strings.Contains(got, "oc") {
		t.Fatalf("stripped Via of a client that did not ask: %q", got)
	}
	plain := parsedVia(t, `SIP/2.0/UDP 127.0.0.2:5060;branch=z9hG4bK1;x="a";rport`)
	before := plain.Value()
	Strip(plain)
	if plain.Value() != before {
		t.Fatalf("ocStrip changed a Via without oc parameters: %q to %q", before, plain.Value())
	}
	Strip(nil) // no panic

	// A repair never puts another value in front of a parameter sipgo
	// parsed as it is: the stateless relay's MAC reads the exact branch,
	// received and rport.
	swap := parsedVia(t, `SIP/2.0/UDP 127.0.0.2:45120;x="q";branch=z9hG4bK.EVIL;branch=z9hG4bK.peer-bye-1;received=127.0.0.2;rport=45120;oc=100`)
	macBranch, _ := swap.Params.Get("branch")
	Strip(swap)
	if b, _ := swap.Params.Get("branch"); b != macBranch || strings.Contains(swap.Value(), "EVIL") {
		t.Fatalf("stripped Via's branch: %q (MAC read %q): %q", b, macBranch, swap.Value())
	}
	if strings.Contains(swap.Value(), ";oc") {
		t.Fatalf("a valueless oc added where the client sent none: %q", swap.Value())
	}
	// Nor does a repair add one the MAC saw absent.
	for _, v := range []string{
		`SIP/2.0/UDP 127.0.0.2:45120;x="q";branch=z9hG4bKEVIL;received=9.9.9.9;rport;oc=4`,
		`SIP/2.0/UDP 127.0.0.2:45120;branch=z9hG4bK1;x="q";received=9.9.9.9;oc=4`,
		`SIP/2.0/UDP 127.0.0.2:45120;branch=z9hG4bK1;x="q";rport;oc=4`,
	} {
		via := parsedVia(t, v)
		before := map[string]string{}
		for _, k := range []string{"branch", "received", "rport"} {
			if val, ok := via.Params.Get(k); ok {
				before[k] = val
			}
		}
		Strip(via)
		for _, k := range []string{"branch", "received", "rport"} {
			val, ok := via.Params.Get(k)
			if want, had := before[k]; ok != had || val != want {
				t.Fatalf("ocStrip of %q: %s %q (present %v), the MAC read %q (present %v): %q", v, k, val, ok, want, had, via.Value())
			}
		}
	}
	// A quoted value with a blank is quoted once.
	blank := parsedVia(t, `SIP/2.0/UDP 127.0.0.2:5060;branch=z9hG4bK1;x="a b";oc`)
	Mark(meter.Current(time.Now()), blank)
	if got := blank.Value(); !strings.Contains(got, `;x="a b";`) {
		t.Fatalf("marked Via with a quoted blank: %q", got)
	}
	// Also when sipgo kept it quoted under its own name.
	last := parsedVia(t, `SIP/2.0/UDP 127.0.0.2:5060;branch=z9hG4bK1;oc;x="a;b c"`)
	Mark(meter.Current(time.Now()), last)
	if got := last.Value(); !strings.Contains(got, `;x="a;b c";`) {
		t.Fatalf("marked Via with a quoted blank last: %q", got)
	}
	// A quoted value may hold a ';'.
	semi := parsedVia(t, `SIP/2.0/UDP 127.0.0.2:5060;branch=z9hG4bKreal;x="a;b";rport;oc`)
	if !Asked(semi) {
		t.Fatal("an oc after a quoted value holding ';' does not ask")
	}
	Mark(meter.Current(time.Now()), semi)
	if got := semi.Value(); !strings.Contains(got, `;x="a;b";`) || !strings.Contains(got, ";branch=z9hG4bKreal;") || strings.Count(got, ";oc=") != 1 {
		t.Fatalf("marked Via with a quoted ';': %q", got)
	}
}
