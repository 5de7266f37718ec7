package oc

import (
	"strconv"
	"strings"

	sipmsg "github.com/emiago/sipgo/sip"
)

// Asked reports whether a request's top Via asks for overload control:
// it carries an "oc" parameter (parameter names are case-insensitive;
// the name is read as paramName reads it). A nil Via does not ask.
func Asked(via *sipmsg.ViaHeader) bool {
	if via == nil {
		return false
	}
	for _, kv := range via.Params {
		if name, _, _ := paramName(kv); strings.EqualFold(name, "oc") {
			return true
		}
	}
	return false
}

// Mark writes v into via, the top Via of a response on its way to a
// client that asked (Asked of its request): every oc parameter the Via
// holds is replaced by the node's four (a party downstream cannot speak
// for the node), and keys sipgo mangled are repaired (clean). via must be
// the response's own header (a response built from a request clones the
// request's; a relayed response's is its own). The quoted oc-algo goes
// last, so that a client on a parser like sipgo's mangles nothing after
// it. A nil via or v is left alone.
func Mark(v *Value, via *sipmsg.ViaHeader) {
	if v == nil || via == nil {
		return
	}
	params, _ := clean(via.Params, false)
	via.Params = append(params,
		sipmsg.HeaderKV{K: "oc", V: v.oc},
		sipmsg.HeaderKV{K: "oc-validity", V: strconv.Itoa(Validity)},
		sipmsg.HeaderKV{K: "oc-seq", V: v.seq},
		sipmsg.HeaderKV{K: "oc-algo", V: Algo},
	)
}

// Strip removes the oc values from via, the top Via of a response
// relayed to a client that did not ask, or relayed without knowing its
// request (a stateless relay): only the node may speak for itself to the
// party above, so whatever values the party below wrote go, and the
// client's own valueless oc stays as it was sent (none is added where
// there was none). A Via without any oc parameter, or nil, is left
// untouched.
func Strip(via *sipmsg.ViaHeader) {
	if via == nil || !hasParam(via) {
		return
	}
	params, asked := clean(via.Params, true)
	if asked {
		params = append(params, sipmsg.HeaderKV{K: "oc"})
	}
	via.Params = params
}

// paramName is a Via parameter's name and value as the sender wrote
// them, from what sipgo's parser (v1.7.2) left: it mangles a quoted value,
// giving `;x="a";oc=5;rport` the key `x="a";oc=5;rport` (the rest of the
// header; the value is a) and then the keys ";oc" (5) and "rport" again.
// So a key is trimmed of the ';' and blanks around it, and a key that
// still holds a ';', '=' or '"' is cut to its first parameter (at a ';'
// outside quotes), whose value keeps its quotes; repaired reports either.
func paramName(kv sipmsg.HeaderKV) (name, value string, repaired bool) {
	k := strings.Trim(kv.K, "; \t")
	if !strings.ContainsAny(k, ";=\"") {
		return k, strings.TrimSpace(kv.V), k != kv.K
	}
	quoted := false
	end := len(k)
	for i := 0; i < len(k); i++ {
		if k[i] == '"' {
			quoted = !quoted
		} else if k[i] == ';' && !quoted {
			end = i
			break
		}
	}
	name, value, _ = strings.Cut(k[:end], "=")
	return strings.TrimSpace(name), unquoteBlank(strings.TrimSpace(value)), true
}

// unquoteBlank drops the quotes around a value with a blank in it: sipgo's
// writer quotes such a value itself, and would quote it twice.
func unquoteBlank(v string) string {
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' && strings.ContainsAny(v, " \t") {
		return v[1 : len(v)-1]
	}
	return v
}

// isParam reports a parameter name of RFC 7339's: oc, or oc-...
func isParam(name string) bool {
	return strings.EqualFold(name, "oc") || (len(name) >= 3 && strings.EqualFold(name[:3], "oc-"))
}

// clean returns params without any RFC 7339 parameter and with the keys
// sipgo mangled repaired (paramName), and whether the client's own
// valueless "oc" was among them. The oc values a Via carries are only
// ever the node's to write: a client's is the valueless oc, and anything
// else there came from a party downstream.
//
// A parameter as sipgo parsed it (an exact key) always wins over a
// repaired one of the same name, which is dropped: a stateless relay's
// MAC and sipgo's transactions read the exact branch, received and rport,
// and a repair must never put another value in front of them. With strict
// (a Via a party downstream may have written), a repaired branch,
// received, rport or maddr is dropped even where no exact one exists, so
// a repair never adds one the MAC saw absent. A repaired name is kept
// once.
func clean(params sipmsg.HeaderParams, strict bool) (out sipmsg.HeaderParams, asked bool) {
	exact := make(map[string]bool, len(params))
	for _, kv := range params {
		if _, _, repaired := paramName(kv); !repaired {
			exact[strings.ToLower(kv.K)] = true
		}
	}
	out = make(sipmsg.HeaderParams, 0, len(params)+4)
	seen := make(map[string]bool, len(params))
	for _, kv := range params {
		name, value, repaired := paramName(kv)
		low := strings.ToLower(name)
		switch {
		case name == "":
		case isParam(name):
			asked = asked || (low == "oc" && value == "")
		case !repaired:
			out = append(out, sipmsg.HeaderKV{K: kv.K, V: unquoteBlank(kv.V)})
		case strict && (low == "branch" || low == "received" || low == "rport" || low == "maddr"):
		case !exact[low] && !seen[low]:
			seen[low] = true
			out = append(out, sipmsg.HeaderKV{K: name, V: value})
		}
	}
	return out, asked
}

// hasParam reports whether via holds any RFC 7339 parameter.
func hasParam(via *sipmsg.ViaHeader) bool {
	for _, kv := range via.Params {
		if name, _, _ := paramName(kv); isParam(name) {
			return true
		}
	}
	return false
}

// Mangled reports a Via whose parameters sipgo's parser (v1.7.2)
// mangled: a quoted value makes the rest of the header one key, and the
// next key start with ';' (paramName repairs such keys).
func Mangled(via *sipmsg.ViaHeader) bool {
	for _, kv := range via.Params {
		if _, _, repaired := paramName(kv); repaired {
			return true
		}
	}
	return false
}
