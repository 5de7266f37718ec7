package httpapi

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/cpsguard/cpsguard/carriers"
)

// maxServiceReason bounds the reason an operator gives for taking a
// carrier out of service (runes).
const maxServiceReason = 200

// serviceView is o as the API shows it.
func serviceView(o carriers.Out) *CarrierService {
	return &CarrierService{Since: o.Since.UTC().Truncate(time.Millisecond), By: o.By, Reason: o.Reason}
}

// parseService reads the optional JSON body of PUT .../service: {"reason":
// "..."}, printable, at most maxServiceReason runes.
func parseService(r *http.Request) (ServiceRequest, *Error) {
	var req ServiceRequest
	dec := json.NewDecoder(io.LimitReader(r.Body, maxLimitBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil && !errors.Is(err, io.EOF) {
		return req, &Error{Code: http.StatusBadRequest, Message: "invalid body",
			Errors: []string{"body: want JSON {\"reason\": \"maintenance\"} or nothing: " + strings.TrimPrefix(err.Error(), "json: ")}}
	}
	switch {
	case utf8.RuneCountInString(req.Reason) > maxServiceReason:
		return req, &Error{Code: http.StatusBadRequest, Message: "invalid body", Errors: []string{"reason: at most 200 characters"}}
	case strings.IndexFunc(req.Reason, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0:
		return req, &Error{Code: http.StatusBadRequest, Message: "invalid body", Errors: []string{"reason: printable characters only"}}
	}
	return req, nil
}

// service answers PUT (out of service) and DELETE (back in service) on
// /api/v1/carriers/{name}/service.
func (s *server) service(w http.ResponseWriter, r *http.Request) {
	if !s.authorize(w, r, "carrier service change") {
		return
	}
	if s.o.Carriers == nil {
		writeError(w, &Error{Code: http.StatusNotImplemented, Message: "carrier service changes are not available on this node"})
		return
	}
	name := r.PathValue("name")
	res := ServiceChange{Carrier: name}
	var prev *carriers.Out
	var ok bool
	var err error
	if r.Method == http.MethodPut {
		req, e := parseService(r)
		if e != nil {
			writeError(w, e)
			return
		}
		prev, ok, err = s.o.Carriers.TakeOut(r.Context(), name, r.RemoteAddr, req.Reason)
		res.Status = "out_of_service"
		if ok && err == nil {
			st, _ := s.o.Carriers.State(name)
			if st.Out != nil {
				res.OutOfService = serviceView(*st.Out)
			}
		}
	} else {
		prev, ok, err = s.o.Carriers.PutBack(r.Context(), name)
		res.Status = "in_service"
	}
	switch {
	case !ok:
		writeError(w, &Error{Code: http.StatusNotFound, Message: "no such carrier: " + printable(name)})
		return
	case err != nil:
		s.o.Logger.Warn("carrier service change failed: the store did not answer", "remote", r.RemoteAddr, "carrier", name, "status", res.Status, "error", err)
		writeError(w, &Error{Code: http.StatusServiceUnavailable, Message: "the store did not answer; nothing changed: " + err.Error()})
		return
	}
	if prev != nil {
		res.Previous = serviceView(*prev)
	}
	attrs := []any{"remote", r.RemoteAddr, "carrier", name, "was_out", prev != nil}
	if res.OutOfService != nil {
		attrs = append(attrs, "reason", res.OutOfService.Reason)
		s.o.Logger.Info("carrier taken out of service", attrs...)
	} else {
		s.o.Logger.Info("carrier put back in service", attrs...)
	}
	writeJSON(w, http.StatusOK, res)
}
