package wire

import (
	"strings"
	"testing"
)

// hostileMsg is a message of start and headers.
func hostileMsg(start string, headers ...string) string {
	return start + "\r\n" + strings.Join(headers, "\r\n") + "\r\n\r\n"
}

// hostileBase are the headers of a message the hostile inputs change.
var hostileBase = []string{
	"Via: SIP/2.0/UDP 10.0.0.1:5060;branch=z9hG4bK1",
	"From: <sip:a@b>;tag=1",
	"To: <sip:c@d>",
	"Call-ID: abc",
	"CSeq: 1 INVITE",
}

// hostileInputs are h73's hand-made inputs.
func hostileInputs() []string {
	const inv = "INVITE sip:x@y SIP/2.0"
	var in []string
	add := func(start string, hs ...string) { in = append(in, hostileMsg(start, hs...)) }
	// header names with Unicode case / odd lengths
	for _, n := range []string{"\u212Aontact", "Via\u017f", "\u017fia", "Call-\u0130D", "CALL-ID", "cAlL-iD", "Max-Forwards", "MAX-FORWARDS", "max-forwards",
		"Content-Lengthxx", "Content-Lengthxxx", "Content-Length-x", "X-0123456789abcde", "X-0123456789abcd", "X-0123456789abc", "V", "F", "T", "I", "M", "L", "C", "K", "", " ", "\tVia\t", "Via ", " Via", "\u00a0Via", "Via\u0085"} {
		add(inv, append([]string{n + ": SIP/2.0/UDP h;branch=1"}, hostileBase[1:]...)...)
		add(inv, append(append([]string{}, hostileBase...), n+": <sip:q@r>;tag=9")...)
		add(inv, append(append([]string{}, hostileBase...), n+": 5")...)
	}
	// empty values
	for _, n := range []string{"Via", "From", "To", "Contact", "Call-ID", "CSeq", "Max-Forwards", "Content-Length", "Route", "Record-Route", "Content-Type", "X"} {
		add(inv, append(append([]string{}, hostileBase...), n+":")...)
		add(inv, append(append([]string{}, hostileBase...), n+":   ")...)
		add(inv, append(append([]string{}, hostileBase...), n+":\x00")...)
		add(inv, append(append([]string{}, hostileBase...), n+": \u00a0")...)
	}
	// content-length
	for _, cl := range [][]string{{"Content-Length: 3"}, {"Content-Length: 3", "l: 0"}, {"l: 0", "Content-Length: 3"}, {"Content-Length: 99"}, {"Content-Length: 4294967295"}, {"Content-Length: 4294967296"}, {"Content-Length: -1"}, {"Content-Length: +3"}, {"Content-Length: 03"}, {"Content-Length: 3 "}, {"Content-Length: 16000"}, {"Content-Length: 16339"}} {
		for _, body := range []string{"", "abc", "abcdef", "\r\n", "\r"} {
			in = append(in, hostileMsg(inv, append(append([]string{}, hostileBase...), cl...)...)+body)
		}
	}
	// line endings
	in = append(in,
		inv+"\nVia: SIP/2.0/UDP h\r\n\r\n",
		inv+"\r\nVia: SIP/2.0/UDP h\nCall-ID: x\r\n\r\n",
		inv+"\r\nVia: SIP/2.0/UDP h;branch=1\n\r\n\r\n",
		inv+"\r\nCall-ID: x\r\n\r",
		inv+"\r\nCall-ID: x\r\n\r\n\r",
		inv+"\r\nCall-ID: x\r\r\n\r\n",
		inv+"\r\nCall-ID: x\r\n\n\r\n",
		inv+"\r\n\r\n\r\n",
		inv+"\r\n \r\n\r\n",
		inv+"\r\n Call-ID: x\r\n\r\n",
		inv+"\r\n\tVia: SIP/2.0/UDP h\r\n\r\n",
		inv+"\r\nCall-ID: x\r\n \r\n\r\n",
		inv+"\r\nCall-ID: x\r\n\t\r\n\r\n",
		inv+"\r\nCall-ID: x\r\n y\r\n\r\n",
		inv+"\r\nCall-ID: x\r\nCSeq: 1 INVITE\r\n \r\n",
		inv+"\r\nCall-ID: x\r\n\r\n body",
		inv+"\r\nCall-ID: x\x00y\r\n\r\n",
		inv+"\x00\r\nCall-ID: x\r\n\r\n",
	)
	// Vias
	v6 := "SIP/2.0/UDP [2001:db8::1]:5060;branch=v6"
	v4 := "SIP/2.0/UDP 1.2.3.4:5060;branch=v4;rport;received=1.1.1.1"
	vn := "SIP/2.0/UDP h"
	for _, list := range [][]string{{v6, v4}, {v4, v6}, {v4, v4, v6}, {v4, v4, v4, v4}, {v6, v6, v4}, {v4, vn}, {vn, v4}, {v4, v4, v4, v6, v4}} {
		add(inv, append([]string{"Via: " + strings.Join(list, ", ")}, hostileBase[1:]...)...)
		add(inv, append([]string{"Via: " + strings.Join(list, ",")}, hostileBase[1:]...)...)
		hs := []string{}
		for _, v := range list {
			hs = append(hs, "Via: "+v)
		}
		add(inv, append(hs, hostileBase[1:]...)...)
		add("SIP/2.0 200 OK", append(hs, hostileBase[1:]...)...)
	}
	add(inv, `Via: SIP/2.0/UDP h;x="a,b";branch=1, SIP/2.0/UDP g`, "Call-ID: x")
	add(inv, `Via: SIP/2.0/UDP h;x="a;b;c";branch=1`, "Call-ID: x")
	add(inv, `Via: SIP/2.0/UDP h;x="unterminated`, "Call-ID: x")
	add(inv, `Via: SIP/2.0/UDP h;a="x"`, "Call-ID: x")
	add(inv, `Via: SIP/2.0/UDP h;a="x";b="y";c="z"`, "Call-ID: x")
	add(inv, `Via: SIP/2.0/UDP h:;branch=1`, "Call-ID: x")
	add(inv, `Via: SIP/2.0/UDP :5060;branch=1`, "Call-ID: x")
	add(inv, `Via: SIP/2.0/UDP h:50:60;branch=1`, "Call-ID: x")
	add(inv, `Via: SIP/2.0/UDP h:+5;branch=1`, "Call-ID: x")
	add(inv, `Via: SIP/2.0/UDP h:99999999999999999999;branch=1`, "Call-ID: x")
	add(inv, `Via: SIP/2.0/UDP h;branch=1;branch=2;branch=3`, "Call-ID: x")
	add(inv, `Via: SIP/2.0/UDP h;;;;;;;;;;;;;;;;;;;;;`, "Call-ID: x")
	add(inv, `Via: SIP/2.0/UDP h;=;=;=`, "Call-ID: x")
	add(inv, `Via: SIP/2.0/UDP h;,`, "Call-ID: x")
	add(inv, `Via: SIP/2.0/UDP h;a,;b`, "Call-ID: x")
	add(inv, `Via: SIP/2.0/UDP h;a, ,`, "Call-ID: x")
	add(inv, `Via: SIP/2.0/UDP h;a, SIP/2.0/UDP [::1`, "Call-ID: x")
	add(inv, `Via: SIP/2.0/UDP  [::1]:5;a`, "Call-ID: x")
	add(inv, "Via: SIP/2.0/UDP\th;a=1", "Call-ID: x")
	add(inv, "Via: SIP / 2.0 / UDP h ; a = 1", "Call-ID: x")
	add(inv, "Via: SIP/2.0/UDP h;a=\u00e9\u2028", "Call-ID: x")
	add(inv, "Via: SIP/2.0/UDP h;a=\xff\xfe", "Call-ID: x")
	// params filling the block: 12 slots
	for n := 0; n <= 16; n++ {
		ps := strings.Repeat(";p", n)
		add(inv, "Via: SIP/2.0/UDP h"+ps, "From: <sip:a@b>"+ps, "To: <sip:c@d>"+ps, "Contact: <sip:e@f>"+ps, "Call-ID: x")
		add(inv, "Via: SIP/2.0/UDP h;a"+ps, "Via: SIP/2.0/UDP g"+ps, "Via: SIP/2.0/UDP k"+ps, "From: <sip:a@b;u=1;v=2>;tag=1"+ps, "Call-ID: x")
	}
	// duplicates
	add(inv, "From: <sip:a@b>;tag=1", "From: <sip:c@d>;tag=2", "To: <sip:c@d>", "To: <sip:e@f>;tag=3", "Call-ID: a", "Call-ID: b", "i: c", "CSeq: 1 INVITE", "CSeq: 2 BYE", "Max-Forwards: 70", "Max-Forwards: 69", "Contact: <sip:a>", "m: <sip:b>", "l: 0", "Content-Length: 0")
	// CSeq / Max-Forwards overflow
	for _, cs := range []string{"2147483647 INVITE", "2147483648 INVITE", "4294967295 INVITE", "4294967296 INVITE", "-1 INVITE", "+1 INVITE", "1  INVITE", "1\tINVITE", "1 ", "1", " 1 INVITE", "1 INVITE x", "01 INVITE", "0x1 INVITE", "1_0 INVITE"} {
		add(inv, "Call-ID: x", "CSeq: "+cs)
	}
	for _, mf := range []string{"0", "70", "4294967295", "4294967296", "-1", "+70", "07", "7 0", "1_0", "0x10", ""} {
		add(inv, "Call-ID: x", "Max-Forwards: "+mf)
	}
	// From/To/Contact shapes
	for _, a := range []string{"*", "<*>", "sip:a@b;tag=1", "\"x\" <sip:a@b>;tag=1", "\"x\\\"y\" <sip:a@b>", "\"x", "<sip:a@b", "<>", "<sip:a@b>;tag", "<sip:a@b>;tag=;x=\"a;b\"", "tel:+1234;tag=1", "<tel:+1-234>;tag=1", "<urn:service:sos>", "<sip:[::1]:5060>", "sip:[::1]:5060;tag=1", "\"a,b\" <sip:a@b>", "<sip:a@b>, <sip:c@d>", "<sip:a@b;x=1,2>"} {
		add(inv, "From: "+a, "To: "+a, "Contact: "+a, "Call-ID: x")
	}
	// start lines
	for _, sl := range []string{"INVITE  sip:x@y SIP/2.0", "INVITE sip:x@y  SIP/2.0", " INVITE sip:x@y SIP/2.0", "INVITE sip:x@y SIP/2.0 ", "INVITE sip:x@y Sip/2.0", "INVITE sip:x@y SIPS/2.0", "INVITE sip:x@y SIP", "INVITE sip:x@y SI", "\u0131nvite sip:x@y SIP/2.0", "invit\u00e9 sip:x@y SIP/2.0", "INVITE tel:+123 SIP/2.0", "INVITE sips:x@y SIP/2.0", "INVITE * SIP/2.0", "INVITE sip:* SIP/2.0", "SIP/2.0 200 OK", "SIP/2.0 200  OK", "SIP/2.0  200 OK", "sip/2.0 200 OK", "SIP/2.0 0 X", "SIP/2.0 65535 X", "SIP/2.0 65536 X", "SIP/2.0 -1 X", "SIP/2.0 +200 X", "SIP/2.0 200 ", "SIP/2.0 200", "SIP 200 OK", "SI 200 OK", "SIP/2.0 200 OK sip:x"} {
		add(sl, hostileBase...)
	}
	return in
}

// TestParseMatchesSipgoOnHostileInputs: h73's hand-made attack on
// Parser's edges (header names in Unicode case and of odd lengths, empty
// and NUL values, every Content-Length shape against every body, line
// endings, Vias with IPv6 hosts and commas in every position, parameter
// counts around the block's room, duplicate headers, CSeq and
// Max-Forwards overflows, odd addresses and start lines, messages at the
// size limit): sipgo's parser reads each the same.
func TestParseMatchesSipgoOnHostileInputs(t *testing.T) {
	in := hostileInputs()
	big := hostileMsg("INVITE sip:x@y SIP/2.0", append(append([]string{}, hostileBase...), "X: "+strings.Repeat("a", testMax-200))...)
	in = append(in, big, big+strings.Repeat("b", 200), big[:len(big)-4]+"\r\nContent-Length: 300\r\n\r\n"+strings.Repeat("b", 300))
	for _, s := range in {
		sameParse(t, []byte(s))
	}
}

// TestParseRefusesAtSipgosLimits: messages around the length limit, with
// and without Content-Length, cut anywhere: the same message or error as
// sipgo's parser with the same limit.
func TestParseRefusesAtSipgosLimits(t *testing.T) {
	head := "INVITE sip:a@b SIP/2.0\r\nCall-ID: x\r\n"
	for _, max := range []int{16384, 100} {
		for pad := max - 80; pad <= max+5; pad++ {
			if pad < 0 {
				continue
			}
			for _, cl := range []string{"", "Content-Length: 10\r\n", "Content-Length: 0\r\n"} {
				m := head + cl + "\r\n"
				if pad > len(m) {
					m += strings.Repeat("b", pad-len(m))
				}
				sameParseLimit(t, max, []byte(m))
				m2 := head + cl + "X: " + strings.Repeat("a", max) + "\r\n\r\nbody"
				sameParseLimit(t, max, []byte(m2[:min(len(m2), pad)]))
			}
			for body := 0; body < 12; body++ {
				m := head + "Content-Length: 9\r\n\r\n" + strings.Repeat("b", body)
				if pad > len(m) {
					m = head + "X: " + strings.Repeat("a", pad-len(m)) + "\r\nContent-Length: 9\r\n\r\n" + strings.Repeat("b", body)
				}
				sameParseLimit(t, max, []byte(m))
			}
		}
	}
}
