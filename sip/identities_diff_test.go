package sip

import (
	"strings"
	"testing"

	sipmsg "github.com/emiago/sipgo/sip"

	"github.com/cpsguard/cpsguard/sip/internal/msgpart"
)

// oldIdentities is keepIdentities as it was before it wrote into one
// buffer (3b21339): sipgo's Value and String of each, with the same
// fallbacks past maxIdentityText.
func oldIdentities(inv *sipmsg.Request, ok *sipmsg.Response) (from, callerURI, to, tag, calleeURI string) {
	addrText := func(value string, u sipmsg.Uri, params sipmsg.HeaderParams) string {
		if len(value) <= maxIdentityText {
			return value
		}
		h := sipmsg.FromHeader{Address: bareURI(u), Params: sipmsg.NewParams()}
		if tag, ok := params.Get("tag"); ok {
			h.Params.Add("tag", tag)
		}
		return h.Value()
	}
	uriText := func(u sipmsg.Uri) string {
		if s := u.String(); len(s) <= maxIdentityText {
			return s
		}
		b := bareURI(u)
		return b.String()
	}
	if f := inv.From(); f != nil {
		from = addrText(f.Value(), f.Address, f.Params)
		callerURI = uriText(f.Address)
	}
	if ct := inv.Contact(); ct != nil && ct.Address.Host != "" {
		callerURI = uriText(ct.Address)
	}
	if t := ok.To(); t != nil {
		to, tag = addrText(t.Value(), t.Address, t.Params), msgpart.Tag(t.Params)
	}
	calleeURI = uriText(inv.Recipient)
	if ct := ok.Contact(); ct != nil && ct.Address.Host != "" {
		calleeURI = uriText(ct.Address)
	}
	return
}

// TestKeepIdentitiesAsBefore: keepIdentities keeps, for each of the four
// texts, what it kept before it wrote them into one buffer, with each one
// past maxIdentityText (its fallback) and the others not, and without a
// Contact.
func TestKeepIdentitiesAsBefore(t *testing.T) {
	long := strings.Repeat(";p=xxxxxxxx", 120)
	for _, tc := range []struct{ name, ruri, from, to, callerCt, calleeCt string }{
		{"plain", "sip:100@127.0.0.1", `"A" <sip:a@127.0.0.2>;tag=f1`, `<sip:100@127.0.0.1>;tag=t1`, "<sip:a@127.0.0.2:5060>", "<sip:b@127.0.0.1:5070>"},
		{"long from", "sip:100@127.0.0.1", `<sip:a@127.0.0.2` + long + `>;tag=f1`, `<sip:100@127.0.0.1>;tag=t1`, "<sip:a@127.0.0.2:5060>", "<sip:b@127.0.0.1:5070>"},
		{"long from params", "sip:100@127.0.0.1", `<sip:a@127.0.0.2>;tag=f1` + long, `<sip:100@127.0.0.1>;tag=t1`, "<sip:a@127.0.0.2:5060>", "<sip:b@127.0.0.1:5070>"},
		{"long to", "sip:100@127.0.0.1", `<sip:a@127.0.0.2>;tag=f1`, `"B" <sip:100@127.0.0.1` + long + `>;tag=t1`, "<sip:a@127.0.0.2:5060>", "<sip:b@127.0.0.1:5070>"},
		{"long to, no tag", "sip:100@127.0.0.1", `<sip:a@127.0.0.2>;tag=f1`, `<sip:100@127.0.0.1>` + long, "<sip:a@127.0.0.2:5060>", "<sip:b@127.0.0.1:5070>"},
		{"long caller contact", "sip:100@127.0.0.1", `<sip:a@127.0.0.2>;tag=f1`, `<sip:100@127.0.0.1>;tag=t1`, "<sip:a@127.0.0.2:5060" + long + ">", "<sip:b@127.0.0.1:5070>"},
		{"long callee contact", "sip:100@127.0.0.1", `<sip:a@127.0.0.2>;tag=f1`, `<sip:100@127.0.0.1>;tag=t1`, "<sip:a@127.0.0.2:5060>", "<sip:b@127.0.0.1:5070" + long + ">"},
		{"no contacts, long from and ruri", "sip:100@127.0.0.1" + long, `<sip:a@127.0.0.2` + long + `>;tag=f1`, `<sip:100@127.0.0.1>;tag=t1`, "", ""},
		{"all long", "sip:100@127.0.0.1" + long, `<sip:a@127.0.0.2` + long + `>;tag=f1`, `<sip:100@127.0.0.1` + long + `>;tag=t1`, "<sip:a@127.0.0.2:5060" + long + ">", "<sip:b@127.0.0.1:5070" + long + ">"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ct := func(c string) string {
				if c == "" {
					return ""
				}
				return "Contact: " + c + "\r\n"
			}
			inv := parseRaw(t, "INVITE "+tc.ruri+" SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.2:5060;branch=z9hG4bK-d\r\nFrom: "+tc.from+"\r\nTo: <sip:100@127.0.0.1>\r\nCall-ID: diff\r\nCSeq: 1 INVITE\r\n"+ct(tc.callerCt)+"Content-Length: 0\r\n\r\n").(*sipmsg.Request)
			ok := parseRaw(t, "SIP/2.0 200 OK\r\nVia: SIP/2.0/UDP 127.0.0.2:5060;branch=z9hG4bK-d\r\nFrom: "+tc.from+"\r\nTo: "+tc.to+"\r\nCall-ID: diff\r\nCSeq: 1 INVITE\r\n"+ct(tc.calleeCt)+"Content-Length: 0\r\n\r\n").(*sipmsg.Response)
			var d dialogState
			d.keepIdentities(inv, ok)
			from, callerURI, to, tag, calleeURI := oldIdentities(inv, ok)
			for _, c := range []struct{ what, got, want string }{
				{"callerFrom", d.callerFrom, from}, {"callerURI", d.callerURI, callerURI},
				{"calleeTo", d.calleeTo, to}, {"calleeTag", d.calleeTag, tag}, {"calleeURI", d.calleeURI, calleeURI},
			} {
				if c.got != c.want {
					t.Errorf("%s = %.120q, want %.120q", c.what, c.got, c.want)
				}
				if len(c.got) > maxIdentityText {
					t.Errorf("%s kept in %d bytes, past maxIdentityText", c.what, len(c.got))
				}
			}
		})
	}
}
