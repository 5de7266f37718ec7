// Package msgpart reads, copies and edits parts of parsed sipgo messages
// (github.com/emiago/sipgo/sip, imported as sipmsg): a From or To tag, the
// Call-ID, a header's value, a message's Vias and Record-Routes, the
// packet source, the address of a URI's or Via's host, where responses to
// a request go; a copy of a request to forward that shares what it may
// with the received one (ForwardCopy), copies that share no memory with
// their message (DetachedFrom, DetachedURI, DetachedParams), a request in
// the dialog of another (RequestOf); Max-Forwards less one, the removal of
// a header in any spelling, of every Via but the top one, of the proxy's
// own Via from a response to relay.
//
// It knows nothing of calls, peers, carriers or the node's
// configuration, and keeps no state: the sip package decides what to read
// and change, and when. Everything here works on the sipgo types and
// plain values it is given, as sipgo itself reads and writes them, so the
// bytes the node writes are the ones sipgo's own code would.
//
// # Failure
//
// Nothing here returns an error or panics on a message sipgo parsed: a
// missing header reads as the zero value ("" for a tag, a Call-ID or a
// header's value, false for HasToTag and ToTagged, an invalid address
// for a host name, nil for a nil From), and a missing Max-Forwards counts
// as 70. The edits change the message they are given (RelayResponse too:
// no copy), which the caller owns, by replacing, removing or prepending
// entries of its header list, never a header object in place: a copy
// ForwardCopy made shares its header objects with the received request.
//
// Everything here is safe for concurrent use on messages that are not
// being changed.
package msgpart
