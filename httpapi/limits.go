package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/limits"
)

// Limiter changes and lists the pool's live limit overrides.
// *limits.Overrides satisfies it.
type Limiter interface {
	// Set stores o for ttl pool-wide and applies it on this node at once;
	// it returns the override it replaced (nil: none).
	Set(ctx context.Context, o limits.Override, ttl time.Duration) (*limits.Override, error)
	// Delete ends the override of scope and name; nil when there was none.
	Delete(ctx context.Context, scope, name string) (*limits.Override, error)
	// List returns the live overrides this node applies.
	List() []limits.Override
	// Lookup returns the live override of scope and name.
	Lookup(scope, name string) (limits.Override, bool)
}

// maxLimitBody bounds a PUT /api/v1/limits body.
const maxLimitBody = 64 << 10

// configured is what the configuration says of one scope's name: whether
// it exists, its cps and burst.
func configured(cfg *config.Config, scope, name string) (cps float64, burst int, ok bool) {
	switch scope {
	case limits.ScopePeer:
		for i := range cfg.Peers {
			if cfg.Peers[i].Name == name {
				return cfg.Peers[i].CPS, cfg.Peers[i].Burst, true
			}
		}
	case limits.ScopeCustomer:
		if cu := cfg.Customer(name); cu != nil {
			return cu.CPS, cu.Burst, true
		}
	case limits.ScopeCarrier:
		if ca := cfg.Carrier(name); ca != nil {
			return ca.CPS, 0, true
		}
	}
	return 0, 0, false
}

// overrideView is o as the API shows it against cfg, at now.
func overrideView(cfg *config.Config, o limits.Override, now time.Time) LimitOverride {
	v := LimitOverride{
		Scope: o.Scope, Name: o.Name, CPS: o.CPS, Burst: o.Burst,
		Until: o.Until.UTC().Truncate(time.Millisecond), TTLSeconds: max(0, o.Until.Sub(now).Round(time.Millisecond).Seconds()),
		SetBy: o.SetBy, SetAt: o.SetAt.UTC(),
	}
	if cfg != nil {
		if cps, burst, ok := configured(cfg, o.Scope, o.Name); ok {
			v.ConfiguredCPS, v.ConfiguredBurst = cps, burst
		} else {
			v.Ignored = o.Scope + " " + o.Name + " is not configured on this node: the override does not apply"
		}
	}
	return v
}

// authorize is the one gate of every request that changes the node
// (reload, limit overrides, and any write endpoint added later: call it
// first). With no http.token configured the API is read-only: it answers
// 403 saying so. Otherwise the request needs "Authorization: Bearer
// <http.token>": 401 when it is missing or wrong. It returns whether the
// request may go on.
func (s *server) authorize(w http.ResponseWriter, r *http.Request, what string) bool {
	token := ""
	if cfg := s.o.Config(); cfg != nil {
		token = cfg.HTTP.Token
	}
	if token == "" {
		s.refusals.warn(s.o.Logger, r, what+" refused: http.token is not set, the API is read-only")
		writeError(w, &Error{Code: http.StatusForbidden, Message: ErrReadOnly})
		return false
	}
	got, ok := bearer(r.Header.Get("Authorization"))
	if !ok {
		s.refusals.warn(s.o.Logger, r, what+" refused: no bearer token")
		w.Header().Set("WWW-Authenticate", `Bearer realm="cpsguard"`)
		writeError(w, &Error{Code: http.StatusUnauthorized, Message: "missing bearer token"})
		return false
	}
	if !tokenEqual(got, token) {
		s.refusals.warn(s.o.Logger, r, what+" refused: wrong bearer token")
		w.Header().Set("WWW-Authenticate", `Bearer realm="cpsguard", error="invalid_token"`)
		writeError(w, &Error{Code: http.StatusUnauthorized, Message: "invalid bearer token"})
		return false
	}
	return true
}

func (s *server) limitsList(w http.ResponseWriter, _ *http.Request) {
	if s.o.Limits == nil {
		writeError(w, &Error{Code: http.StatusNotImplemented, Message: "limit overrides are not available on this node"})
		return
	}
	cfg, now := s.o.Config(), time.Now()
	list := LimitList{Overrides: []LimitOverride{}}
	for _, o := range s.o.Limits.List() {
		list.Overrides = append(list.Overrides, overrideView(cfg, o, now))
	}
	writeJSON(w, http.StatusOK, list)
}

// limitTarget checks the scope of /api/v1/limits/{scope}/{name}.
func limitTarget(r *http.Request) (scope, name string, e *Error) {
	scope, name = r.PathValue("scope"), r.PathValue("name")
	if !limits.ValidScope(scope) {
		return "", "", &Error{Code: http.StatusNotFound, Message: fmt.Sprintf("no such scope %q: use peer, customer or carrier", scope)}
	}
	return scope, name, nil
}

func (s *server) limitsChange(w http.ResponseWriter, r *http.Request) {
	if !s.authorize(w, r, "limit override") {
		return
	}
	if s.o.Limits == nil {
		writeError(w, &Error{Code: http.StatusNotImplemented, Message: "limit overrides are not available on this node"})
		return
	}
	scope, name, e := limitTarget(r)
	if e != nil {
		writeError(w, e)
		return
	}
	cfg := s.o.Config()
	if cfg == nil {
		writeError(w, &Error{Code: http.StatusServiceUnavailable, Message: "no configuration loaded"})
		return
	}
	if r.Method == http.MethodDelete {
		s.limitDelete(w, r, cfg, scope, name)
		return
	}
	s.limitSet(w, r, cfg, scope, name)
}

// repeatedKey returns a key the top-level JSON object data gives twice,
// compared without case as encoding/json matches fields, or "" (none, or
// not an object: the decoder says what is wrong).
func repeatedKey(data []byte) string {
	dec := json.NewDecoder(bytes.NewReader(data))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return ""
	}
	seen := map[string]bool{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return ""
		}
		k, ok := t.(string)
		if !ok {
			return ""
		}
		low := strings.ToLower(k)
		if seen[low] {
			return k
		}
		seen[low] = true
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return ""
		}
	}
	return ""
}

// parseLimit decodes and validates a PUT body against the configured
// limits of scope's name: every problem at once, each naming its field.
func parseLimit(body io.Reader, scope string) (LimitRequest, time.Duration, []string) {
	var req LimitRequest
	data, err := io.ReadAll(io.LimitReader(body, maxLimitBody))
	if err != nil {
		return req, 0, []string{"body: " + err.Error()}
	}
	if k := repeatedKey(data); k != "" {
		// encoding/json keeps the last of two keys, in any case: a body
		// that says two things is refused, not read as the last one.
		return req, 0, []string{fmt.Sprintf("body: the key %q is given twice (keys are not case-sensitive)", k)}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		msg := err.Error()
		if strings.Contains(msg, `unknown field "max_calls"`) {
			// max_calls has no live override (limits.Override): change it in
			// the file and reload.
			return req, 0, []string{"max_calls: not supported by this version (cps, burst and ttl are)"}
		}
		return req, 0, []string{"body: want JSON {\"cps\": 20, \"ttl\": \"1h\"}: " + strings.TrimPrefix(msg, "json: ")}
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return req, 0, []string{"body: want one JSON object, and nothing after it"}
	}
	var errs []string
	switch {
	case !(req.CPS > 0):
		errs = append(errs, fmt.Sprintf("cps: must be > 0 (got %g)", req.CPS))
	case req.CPS < config.MinCPS:
		errs = append(errs, fmt.Sprintf("cps: must be >= %g, one call every 1000 s (got %g)", config.MinCPS, req.CPS))
	case req.CPS > config.MaxCPS:
		errs = append(errs, fmt.Sprintf("cps: must be <= %d (got %g)", config.MaxCPS, req.CPS))
	}
	var ttl time.Duration
	if req.TTL == "" {
		errs = append(errs, `ttl: required (a duration such as "90s", "1h"; at most `+fmtTTL(limits.MaxTTL)+")")
	} else if d, err := parseTTL(req.TTL); err != nil {
		errs = append(errs, fmt.Sprintf("ttl: %q is not a duration (e.g. \"30m\", \"1h\", \"7d\")", req.TTL))
	} else if d < limits.MinTTL {
		errs = append(errs, fmt.Sprintf("ttl: must be at least %s (got %s): every node must have time to see it", limits.MinTTL, req.TTL))
	} else if d > limits.MaxTTL {
		errs = append(errs, fmt.Sprintf("ttl: must be at most %s (got %s); a lasting limit belongs in the configuration", fmtTTL(limits.MaxTTL), req.TTL))
	} else {
		ttl = d
	}
	if req.Burst != nil {
		b := *req.Burst
		switch {
		case scope == limits.ScopeCarrier:
			errs = append(errs, "burst: not supported on carriers (pacing spaces a carrier's calls 1/cps apart)")
		case b == 0:
		case b < 0 || float64(b) < req.CPS:
			errs = append(errs, fmt.Sprintf("burst: must be 0 (no burst) or >= cps %g (got %d)", req.CPS, b))
		case b > config.MaxBurst:
			errs = append(errs, fmt.Sprintf("burst: must be <= %d (got %d)", config.MaxBurst, b))
		}
	}
	return req, ttl, errs
}

func (s *server) limitSet(w http.ResponseWriter, r *http.Request, cfg *config.Config, scope, name string) {
	cfgCPS, cfgBurst, ok := configured(cfg, scope, name)
	if !ok {
		writeError(w, &Error{Code: http.StatusNotFound, Message: fmt.Sprintf("%s %q is not configured", scope, name)})
		return
	}
	req, ttl, errs := parseLimit(r.Body, scope)
	if len(errs) > 0 {
		writeError(w, &Error{Code: http.StatusBadRequest, Message: "invalid limit override", Errors: errs})
		return
	}
	now := time.Now()
	o := limits.Override{Scope: scope, Name: name, CPS: req.CPS, Burst: req.Burst, SetBy: r.RemoteAddr, SetAt: now}
	// before is what applied until now: the live override, else the
	// configuration.
	before, hadOverride := s.o.Limits.Lookup(scope, name)
	prev, err := s.o.Limits.Set(r.Context(), o, ttl)
	if err != nil {
		s.limitStoreError(w, r, "set", scope, name, err)
		return
	}
	o.Until = now.Add(ttl)
	if prev != nil {
		before, hadOverride = *prev, true
	}
	beforeCPS, beforeBurst := cfgCPS, cfgBurst
	if hadOverride {
		beforeCPS = before.CPS
		if before.Burst != nil {
			beforeBurst = *before.Burst
		}
	}
	afterBurst := cfgBurst
	if o.Burst != nil {
		afterBurst = *o.Burst
	}
	attrs := []any{"remote", r.RemoteAddr, "scope", scope, "name", name,
		"before_cps", beforeCPS, "after_cps", o.CPS}
	if scope != limits.ScopeCarrier {
		attrs = append(attrs, "before_burst", beforeBurst, "after_burst", afterBurst)
	}
	attrs = append(attrs, "until", o.Until.UTC().Format(time.RFC3339), "ttl", ttl.String(), "replaced_override", hadOverride)
	s.o.Logger.Info("limit override set", attrs...)

	res := LimitChange{Status: "set"}
	v := overrideView(cfg, o, now)
	res.Override = &v
	if prev != nil {
		pv := overrideView(cfg, *prev, now)
		res.Previous = &pv
	}
	writeJSON(w, http.StatusOK, res)
}

func (s *server) limitDelete(w http.ResponseWriter, r *http.Request, cfg *config.Config, scope, name string) {
	prev, err := s.o.Limits.Delete(r.Context(), scope, name)
	if err != nil {
		s.limitStoreError(w, r, "remove", scope, name, err)
		return
	}
	if prev == nil {
		writeError(w, &Error{Code: http.StatusNotFound, Message: fmt.Sprintf("no live override of %s %q", scope, name)})
		return
	}
	now := time.Now()
	cfgCPS, cfgBurst, ok := configured(cfg, scope, name)
	attrs := []any{"remote", r.RemoteAddr, "scope", scope, "name", name, "before_cps", prev.CPS}
	if ok {
		attrs = append(attrs, "after_cps", cfgCPS)
		if scope != limits.ScopeCarrier {
			b := cfgBurst
			if prev.Burst != nil {
				b = *prev.Burst
			}
			attrs = append(attrs, "before_burst", b, "after_burst", cfgBurst)
		}
	} else {
		attrs = append(attrs, "configured", false)
	}
	attrs = append(attrs, "was_until", prev.Until.UTC().Format(time.RFC3339))
	s.o.Logger.Info("limit override removed", attrs...)
	pv := overrideView(cfg, *prev, now)
	writeJSON(w, http.StatusOK, LimitChange{Status: "removed", Previous: &pv})
}

func (s *server) limitStoreError(w http.ResponseWriter, r *http.Request, op, scope, name string, err error) {
	s.o.Logger.Warn("limit override "+op+" failed", "remote", r.RemoteAddr, "scope", scope, "name", name, "error", err.Error())
	code, msg := http.StatusInternalServerError, "override store failed; nothing changed"
	if errors.Is(err, limits.ErrUnavailable) {
		code, msg = http.StatusServiceUnavailable, "override store unavailable (Redis down?); nothing changed on any node"
	}
	writeError(w, &Error{Code: code, Message: msg, Errors: []string{err.Error()}})
}

// fmtTTL writes a whole number of days or hours as such ("30d", "12h").
func fmtTTL(d time.Duration) string {
	if d%(24*time.Hour) == 0 {
		return strconv.Itoa(int(d/(24*time.Hour))) + "d (" + d.String() + ")"
	}
	return d.String()
}

// parseTTL is time.ParseDuration plus whole days ("7d"), the unit an
// operator thinks of a campaign in.
func parseTTL(s string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n > 1000 {
			return 0, fmt.Errorf("httpapi: ttl %q: want whole days", s)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	return time.ParseDuration(s)
}
