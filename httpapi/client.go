package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
)

// maxBody bounds what the client reads of an answer.
const maxBody = 16 << 20

// client talks to a node's operations endpoint directly: like Prometheus's
// scraper it ignores HTTP_PROXY and friends, which would answer for a node
// that is not there (a proxy's 404 or 502 instead of "connection refused").
var client = &http.Client{Transport: &http.Transport{
	Proxy:               nil,
	DialContext:         (&net.Dialer{}).DialContext,
	MaxIdleConnsPerHost: 1,
}}

// BaseURL normalises an --addr value: "127.0.0.1:9090" and
// "http://127.0.0.1:9090/" both become "http://127.0.0.1:9090".
func BaseURL(addr string) string {
	addr = strings.TrimRight(strings.TrimSpace(addr), "/")
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	return addr
}

// ListenURL returns the URL a client on the same machine reaches a server
// listening on listen (http.listen, "host:port") with: a wildcard or empty
// host becomes loopback ("0.0.0.0:9090" -> "http://127.0.0.1:9090", "[::]:9090"
// -> "http://[::1]:9090"). A listen value that is not host:port is returned
// as BaseURL makes it.
func ListenURL(listen string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return BaseURL(listen)
	}
	switch ip := net.ParseIP(host); {
	case host == "":
		host = "127.0.0.1"
	case ip != nil && ip.IsUnspecified() && ip.To4() != nil:
		host = "127.0.0.1"
	case ip != nil && ip.IsUnspecified():
		host = "::1"
	}
	return "http://" + net.JoinHostPort(host, port)
}

// Unreachable is the error of a client call that got no HTTP answer: Reason
// says why in an operator's words ("connection refused", "no answer within
// the timeout", …) and Err is the underlying error.
type Unreachable struct {
	URL    string
	Reason string
	Err    error
}

// Error implements error.
func (e *Unreachable) Error() string { return "cannot reach " + e.URL + ": " + e.Reason }

// Unwrap returns the underlying error.
func (e *Unreachable) Unwrap() error { return e.Err }

// unreachable names the cause of a failed request. A refused connection is
// checked first: a context deadline that ran out meanwhile must not hide it.
func unreachable(base string, err error) error {
	var dnsErr *net.DNSError
	var netErr net.Error
	reason := err.Error()
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		reason = "connection refused (is cpsguard running, and is this its http.listen?)"
	case errors.As(err, &dnsErr):
		reason = "cannot resolve host " + dnsErr.Name
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		reason = "no route to host"
	case errors.Is(err, context.Canceled):
		reason = "interrupted"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		reason = "no answer within the timeout (a firewall dropping packets, or a node too busy to answer)"
	}
	return &Unreachable{URL: BaseURL(base), Reason: reason, Err: err}
}

// get sends GET base+path and returns the status code and body of the
// answer, or an *Unreachable when there is none.
func get(ctx context.Context, base, path string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, BaseURL(base)+path, nil)
	if err != nil {
		return 0, nil, fmt.Errorf("httpapi: request %s: %w", path, err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, unreachable(base, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return 0, nil, fmt.Errorf("httpapi: read %s: %w", path, err)
	}
	return resp.StatusCode, body, nil
}

// answerError turns a non-2xx answer into an *Error.
func answerError(code int, body []byte) *Error {
	e := &Error{Code: code}
	if json.Unmarshal(body, e) != nil || e.Message == "" {
		var h Health
		if json.Unmarshal(body, &h) == nil && h.Error != "" {
			e.Message = h.Error
		} else {
			e.Message = strings.TrimSpace(string(body))
		}
		if e.Message == "" {
			e.Message = http.StatusText(code)
		}
	}
	if code == http.StatusUnauthorized {
		// What the command line's user is missing (the node's answer
		// says what was wrong with the request, not how to fix it).
		e.Message += " (give the node's http.token with --token or CPSGUARD_HTTP_TOKEN)"
	}
	return e
}

// FetchStatus gets GET /api/v1/status from the node at base (see BaseURL).
// An answer that is not 200 is returned as *Error; no answer at all as
// *Unreachable.
func FetchStatus(ctx context.Context, base string) (Status, error) {
	var st Status
	code, body, err := get(ctx, base, PathStatus)
	if err != nil {
		return st, err
	}
	if code != http.StatusOK {
		return st, answerError(code, body)
	}
	if err := json.Unmarshal(body, &st); err != nil {
		return st, fmt.Errorf("httpapi: decode status: %w", err)
	}
	return st, nil
}

// Probe asks the node at base whether it is ready (GET /readyz): nil on
// 200, an *Error with the node's reason on any other answer (503 while it
// drains or has no usable store), an *Unreachable when it does not answer.
func Probe(ctx context.Context, base string) error {
	code, body, err := get(ctx, base, PathReadyz)
	if err != nil {
		return err
	}
	if code != http.StatusOK {
		return answerError(code, body)
	}
	return nil
}

// call sends method base+path with an optional JSON body and bearer token and
// decodes a 2xx answer into out; any other answer is an *Error, none an
// *Unreachable.
func call(ctx context.Context, method, base, path, token string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("httpapi: encode %s: %w", path, err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, BaseURL(base)+path, rd)
	if err != nil {
		return fmt.Errorf("httpapi: request %s: %w", path, err)
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return unreachable(base, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return fmt.Errorf("httpapi: read %s: %w", path, err)
	}
	if resp.StatusCode/100 != 2 {
		return answerError(resp.StatusCode, b)
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("httpapi: decode %s: %w", path, err)
	}
	return nil
}

// limitPath is the path of one override.
func limitPath(scope, name string) string {
	return PathLimits + "/" + url.PathEscape(scope) + "/" + url.PathEscape(name)
}

// FetchLimits gets GET /api/v1/limits from the node at base.
func FetchLimits(ctx context.Context, base string) (LimitList, error) {
	var l LimitList
	err := call(ctx, http.MethodGet, base, PathLimits, "", nil, &l)
	return l, err
}

// SetLimit sends PUT /api/v1/limits/{scope}/{name} with req and the bearer
// token (empty: none) to the node at base.
func SetLimit(ctx context.Context, base, token, scope, name string, req LimitRequest) (LimitChange, error) {
	var c LimitChange
	err := call(ctx, http.MethodPut, base, limitPath(scope, name), token, req, &c)
	return c, err
}

// RemoveLimit sends DELETE /api/v1/limits/{scope}/{name} with the bearer
// token (empty: none) to the node at base.
func RemoveLimit(ctx context.Context, base, token, scope, name string) (LimitChange, error) {
	var c LimitChange
	err := call(ctx, http.MethodDelete, base, limitPath(scope, name), token, nil, &c)
	return c, err
}

// Unpause sends DELETE /api/v1/carriers/{name}/pause with the bearer token
// to the node at base: the carrier's Retry-After pause ends for the pool.
func Unpause(ctx context.Context, base, token, name string) (PauseChange, error) {
	var c PauseChange
	err := call(ctx, http.MethodDelete, base, PathCarriers+"/"+url.PathEscape(name)+"/pause", token, nil, &c)
	return c, err
}

// SetService sends PUT (out true: take the carrier out of service, with
// reason) or DELETE (put it back) /api/v1/carriers/{name}/service with the
// bearer token to the node at base.
func SetService(ctx context.Context, base, token, name string, out bool, reason string) (ServiceChange, error) {
	var c ServiceChange
	path := PathCarriers + "/" + url.PathEscape(name) + "/service"
	if out {
		err := call(ctx, http.MethodPut, base, path, token, ServiceRequest{Reason: reason}, &c)
		return c, err
	}
	err := call(ctx, http.MethodDelete, base, path, token, nil, &c)
	return c, err
}
