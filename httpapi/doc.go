// Package httpapi is cpsguard's operations HTTP server and its client.
//
// The server (New) answers on http.listen, loopback by default:
//
//	GET  /metrics        Prometheus exposition of the injected registry
//	GET  /healthz        200 while the process serves HTTP
//	GET  /readyz         200 when Options.Ready reports nil (SIP listeners up,
//	                     store usable or fallback active), else 503
//	GET  /api/v1/status  Status as JSON: every peer, customer and carrier with
//	                     its limit and the calls in its current window read
//	                     from the store (the whole pool's figure on Redis),
//	                     a token bucket's level (tokens of burst), the calls
//	                     in each extra window, carrier queues and pauses,
//	                     store mode, node id, config hash; one is built
//	                     at a time, shared by the requests that arrive
//	                     while it is (the reads need no token)
//	POST /api/v1/reload  re-read the configuration file; needs
//	                     "Authorization: Bearer <http.token>"; a bad file
//	                     answers 422 with every error
//	POST /api/v1/drain   stop taking calls, let those in progress finish
//	                     (sip.drain_grace), keep serving this API; token;
//	                     answers {"status":"drained"} when done, or
//	                     {"status":"draining"} after 20 s (ask again)
//	GET  /api/v1/limits  the live limit overrides (LimitList)
//	PUT  /api/v1/limits/{peer|customer|carrier}/{name}
//	                     override one limit pool-wide: {"cps": 20, "ttl": "1h"}
//	                     (and "burst" for peers and customers); needs the
//	                     token; an unconfigured name 404, a bad body 400 with
//	                     every error, the store down 503 (nothing changed)
//	DELETE /api/v1/limits/{scope}/{name}
//	                     end an override (404 when none is live); token
//	DELETE /api/v1/carriers/{name}/pause
//	                     end a carrier's Retry-After pause for the pool at
//	                     once (PauseChange; 404 for an unconfigured carrier
//	                     or one not paused, 503 when the store does not
//	                     answer); needs the token, and with no http.token
//	                     configured answers 403 (the API is read-only)
//	GET  /api/v1/calls   the pool's live calls (CallList), ?peer= and
//	                     ?carrier= filter them; partial (this node's only)
//	                     when the pool's list cannot be read
//	DELETE /api/v1/calls/{call_id}
//	                     end the live calls of a Call-ID: the node holding
//	                     one sends BYE to both legs (CANCEL and 503 before
//	                     the answer); another node's are ended by that node
//	                     through its end queue (calls.EndResult says which);
//	                     404 when no node lists one; token
//
// The listener is bounded (Listener): MaxConns connections at once,
// MaxConnsPerSource from one source; more are closed at accept.
//
// Every error answer is JSON (type Error) with a 4xx or 5xx code: unknown path
// 404, wrong method 405 (with Allow), missing or wrong token 401. Two things
// on this server change limits, both needing the token: a reload of the
// operator's own file, and a limit override. With http.token empty (the
// default) the API is read-only: every write endpoint answers 403
// (ErrReadOnly), whatever the request carries; one gate (authorize) decides
// for all of them. Ending a carrier's
// pause is a write too.
// Each override change is logged at info as an audit line ("limit override
// set" / "limit override removed": remote, scope, name, before_cps ->
// after_cps, until), and so is a pause ended ("carrier pause lifted":
// remote, carrier, until, reason).
//
// The server reads everything through the funcs and small interfaces of
// Options, so it holds no state of its own beyond a cache of the config hash.
// A store failure while building the status does not fail the request: the
// entries it could not read have a null current and the error is listed in
// Status.Errors.
//
// The client side (FetchStatus, RenderStatus, Watch, WatchPlain, Probe,
// Drain, FetchLimits, SetLimit, RemoveLimit, RenderLimits, Unpause,
// RenderPauseChange, FetchCalls, EndCall, RenderCalls) backs `cpsguard
// status`, `cpsguard probe`, `cpsguard drain`, `cpsguard limit`, `cpsguard
// carrier` and `cpsguard calls`. It ignores HTTP_PROXY (as Prometheus does) and
// returns *Unreachable, saying why in an operator's words, when a node gives
// no answer at all.
//
// Everything here is safe for concurrent use.
package httpapi
