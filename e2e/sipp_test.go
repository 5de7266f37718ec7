//go:build linux

package e2e

// SIPp as the dialer: bounded runs in a private directory, with the final
// counters of SIPp's statistics file.

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cpsguard/cpsguard/internal/redistest"
)

// sippRun is the result of one SIPp run.
type sippRun struct {
	code  int               // exit code: 0 = every call successful
	stats map[string]string // final row of -trace_stat, by column name
	out   string            // SIPp's output and error log (for failure messages)
}

// n returns a cumulative counter, e.g. "SuccessfulCall".
func (r sippRun) n(name string) int {
	v, _ := strconv.Atoi(r.stats[name+"(C)"])
	return v
}

// summary names the counters that tell a run's story.
func (r sippRun) summary() string {
	var b strings.Builder
	for _, k := range []string{"TotalCallCreated", "SuccessfulCall", "FailedCall", "FailedMaxUDPRetrans",
		"FailedUnexpectedMessage", "FailedTimeoutOnRecv", "FailedCallRejected", "Retransmissions", "DeadCallMsgs", "OutOfCallMsgs"} {
		v := r.stats[k]
		if v == "" {
			v = r.stats[k+"(C)"]
		}
		b.WriteString(k + "=" + v + " ")
	}
	return "exit " + strconv.Itoa(r.code) + ": " + b.String()
}

// failure is summary plus the end of SIPp's logs.
func (r sippRun) failure() string {
	out := r.out
	if len(out) > 3000 {
		out = out[len(out)-3000:]
	}
	return r.summary() + "\n" + out
}

// scenario returns the absolute path of a shipped SIPp scenario.
func scenario(t testing.TB, name string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("..", "testdata", "sipp", name))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("scenario %s: %v", name, err)
	}
	return p
}

// dial runs the shipped caller scenario (uac.xml) from source ip to target:
// calls at rate per second. Every call must end within limit.
func dial(t testing.TB, ip, target string, rate float64, calls int, limit time.Duration, extra ...string) sippRun {
	t.Helper()
	args := []string{"-sf", scenario(t, "uac.xml"), "-i", ip, "-s", "100",
		"-r", num(rate), "-m", strconv.Itoa(calls), "-l", "1000",
		// A call with no answer fails after 10 s instead of hanging.
		"-recv_timeout", "10000"}
	args = append(args, extra...)
	return runSIPp(t, limit, append(args, target)...)
}

// runSIPp runs SIPp to completion, bounded by limit (SIPp's own -timeout and
// a kill a few seconds later).
func runSIPp(t testing.TB, limit time.Duration, args ...string) sippRun {
	t.Helper()
	bin := redistest.Require(t, "sipp")
	ctx, cancel := context.WithTimeout(context.Background(), limit+5*time.Second)
	defer cancel()
	dir := t.TempDir()
	stat := filepath.Join(dir, "stat.csv")
	full := append([]string{"-nostdin", "-trace_err", "-trace_stat", "-stf", stat, "-fd", "1",
		"-timeout", strconv.Itoa(int(limit.Seconds())) + "s", "-timeout_error"}, args...)
	cmd := exec.CommandContext(ctx, bin, full...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	r := sippRun{stats: map[string]string{}}
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			r.code = ee.ExitCode()
		} else {
			t.Fatalf("sipp: %v", err)
		}
	}
	if b, err := os.ReadFile(stat); err == nil {
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		if len(lines) >= 2 {
			head := strings.Split(lines[0], ";")
			last := strings.Split(lines[len(lines)-1], ";")
			for i, h := range head {
				if i < len(last) {
					r.stats[h] = last[i]
				}
			}
		}
	}
	logs, _ := filepath.Glob(filepath.Join(dir, "*errors.log"))
	for _, l := range logs {
		b, _ := os.ReadFile(l)
		if len(b) > 4000 {
			b = b[:4000]
		}
		out = append(out, b...)
	}
	r.out = string(out)
	return r
}
