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
//	                     in each extra window, carrier queues, store mode,
//	                     node id, config hash
//	POST /api/v1/reload  re-read the configuration file; needs
//	                     "Authorization: Bearer <http.token>" when a token is
//	                     set; a bad file answers 422 with every error
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
//
// Every error answer is JSON (type Error) with a 4xx or 5xx code: unknown path
// 404, wrong method 405 (with Allow), missing or wrong token 401. Two things
// on this server change limits, both needing the token when one is
// configured: a reload of the operator's own file, and a limit override.
// Each override change is logged at info as an audit line ("limit override
// set" / "limit override removed": remote, scope, name, before_cps ->
// after_cps, until).
//
// The server reads everything through the funcs and small interfaces of
// Options, so it holds no state of its own beyond a cache of the config hash.
// A store failure while building the status does not fail the request: the
// entries it could not read have a null current and the error is listed in
// Status.Errors.
//
// The client side (FetchStatus, RenderStatus, Watch, WatchPlain, Probe,
// Drain, FetchLimits, SetLimit, RemoveLimit, RenderLimits) backs `cpsguard
// status`, `cpsguard probe`, `cpsguard drain` and `cpsguard limit`. It ignores HTTP_PROXY (as Prometheus does) and
// returns *Unreachable, saying why in an operator's words, when a node gives
// no answer at all.
//
// Everything here is safe for concurrent use.
package httpapi
