package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// maxBody bounds what the client reads of an answer.
const maxBody = 16 << 20

// BaseURL normalises an --addr value: "127.0.0.1:9090" and
// "http://127.0.0.1:9090/" both become "http://127.0.0.1:9090".
func BaseURL(addr string) string {
	addr = strings.TrimRight(strings.TrimSpace(addr), "/")
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	return addr
}

// FetchStatus gets GET /api/v1/status from the node at base (see BaseURL).
// An answer that is not 200 is returned as *Error.
func FetchStatus(ctx context.Context, base string) (Status, error) {
	var st Status
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, BaseURL(base)+PathStatus, nil)
	if err != nil {
		return st, fmt.Errorf("httpapi: status request: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return st, fmt.Errorf("httpapi: get status: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return st, fmt.Errorf("httpapi: read status: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		e := &Error{Code: resp.StatusCode}
		if json.Unmarshal(body, e) != nil || e.Message == "" {
			e.Message = strings.TrimSpace(string(body))
			if e.Message == "" {
				e.Message = http.StatusText(resp.StatusCode)
			}
		}
		return st, e
	}
	if err := json.Unmarshal(body, &st); err != nil {
		return st, fmt.Errorf("httpapi: decode status: %w", err)
	}
	return st, nil
}
