package config

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// An unknown CPSGUARD_ variable is an error naming it and the closest
// known one; before, CPSGUARD_HTTP_LISTN=… was silently ignored and the
// node listened on the file's address.
func TestUnknownEnvVar(t *testing.T) {
	t.Setenv("CPSGUARD_HTTP_LISTN", "127.0.0.1:9191")
	_, err := Parse([]byte(minimal))
	var ve *ValidationError
	want := `CPSGUARD_HTTP_LISTN: unknown environment variable: it sets no configuration key (did you mean "CPSGUARD_HTTP_LISTEN"?)`
	if !errors.As(err, &ve) || !slices.Equal(ve.Errors, []string{want}) {
		t.Fatalf("got %v, want [%q]", err, want)
	}
	// Far from every name: no suggestion.
	os.Unsetenv("CPSGUARD_HTTP_LISTN")
	t.Setenv("CPSGUARD_WHATEVER_ELSE", "1")
	_, err = Parse([]byte(minimal))
	if !errors.As(err, &ve) || len(ve.Errors) != 1 || ve.Errors[0] != "CPSGUARD_WHATEVER_ELSE: unknown environment variable: it sets no configuration key" {
		t.Fatalf("got %v", err)
	}
}

// CPSGUARD_CONFIG, every override and the variables Kubernetes gives a pod
// for a Service named cpsguard are not errors.
func TestKnownEnvVars(t *testing.T) {
	t.Setenv("CPSGUARD_CONFIG", "/etc/cpsguard/cpsguard.yaml")
	t.Setenv("CPSGUARD_HTTP_LISTEN", "127.0.0.1:9191")
	for k, v := range map[string]string{
		"CPSGUARD_SERVICE_HOST":         "10.0.0.11",
		"CPSGUARD_SERVICE_PORT":         "9090",
		"CPSGUARD_SERVICE_PORT_HTTP":    "9090",
		"CPSGUARD_PORT":                 "tcp://10.0.0.11:9090",
		"CPSGUARD_PORT_9090_TCP":        "tcp://10.0.0.11:9090",
		"CPSGUARD_PORT_9090_TCP_PROTO":  "tcp",
		"CPSGUARD_PORT_9090_TCP_PORT":   "9090",
		"CPSGUARD_PORT_9090_TCP_ADDR":   "10.0.0.11",
		"CPSGUARD_METRICS_SERVICE_HOST": "10.0.0.12",
	} {
		t.Setenv(k, v)
	}
	c, err := Parse([]byte(minimal))
	if err != nil {
		t.Fatal(err)
	}
	if c.HTTP.Listen != "127.0.0.1:9191" {
		t.Errorf("http.listen: got %q", c.HTTP.Listen)
	}
	// A variable ending in _PORT that does not hold a service address is
	// still reported.
	t.Setenv("CPSGUARD_SIP_PORT", "5060")
	if _, err := Parse([]byte(minimal)); err == nil || !strings.Contains(err.Error(), "CPSGUARD_SIP_PORT: unknown environment variable") {
		t.Errorf("CPSGUARD_SIP_PORT=5060: got %v, want it reported", err)
	}
}

// An invalid value from the environment is named by its variable, not put
// at a place in the file, even when the file sets the key too.
func TestEnvValueNamesTheVariable(t *testing.T) {
	t.Setenv("CPSGUARD_SIP_REJECT_CODE", "200")
	t.Setenv("CPSGUARD_SIP_LISTEN", "udp://127.0.0.1:5060,sctp://127.0.0.1:5060")
	_, err := Parse([]byte("sip:\n  reject: {code: 503}\n" + minimal))
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("got %v", err)
	}
	want := []string{
		`CPSGUARD_SIP_LISTEN (sip.listen[1]): must be udp://host:port, tcp://host:port or tls://host:port (got "sctp://127.0.0.1:5060")`,
		`CPSGUARD_SIP_REJECT_CODE (sip.reject.code): must be a 4xx, 5xx or 6xx SIP status (got 200)`,
	}
	if got := slices.Sorted(slices.Values(ve.Errors)); !slices.Equal(got, want) {
		t.Errorf("got %q\nwant %q", got, want)
	}
	for i := range ve.Errors {
		if ve.At(i) != (Position{}) {
			t.Errorf("%s: placed at %v in the file", ve.Errors[i], ve.At(i))
		}
	}
}

// Every CPSGUARD_ variable the repository's code reads is known, so no
// command or test tool is refused by the check above.
func TestEveryReadEnvVarIsKnown(t *testing.T) {
	read := regexp.MustCompile(`(?:Getenv|LookupEnv)\("(CPSGUARD_[A-Z0-9_]+)"\)`)
	known := append(EnvVars(), ToolEnvVars...)
	n := 0
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range read.FindAllStringSubmatch(string(b), -1) {
			n++
			if !slices.Contains(known, m[1]) {
				t.Errorf("%s reads %s, which is neither a setting's override nor in ToolEnvVars: Parse would refuse it", path, m[1])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Error("found no Getenv of a CPSGUARD_ variable: the scan is broken")
	}
}

// A host IP templated into brackets ("udp://[$(NODE_IP)]:5060", as the
// Kubernetes examples write it so an IPv6 node works) is taken for an IPv4
// one too, and written without them; an IPv6 one keeps them, and what is
// not an address in brackets is still refused.
func TestBracketedHostIP(t *testing.T) {
	for _, tc := range []struct {
		ip, listen, advertise, http string
	}{
		{"10.20.0.5", "udp://10.20.0.5:5060", "10.20.0.5", "10.20.0.5:9090"},
		{"fd00::5", "udp://[fd00::5]:5060", "fd00::5", "[fd00::5]:9090"},
	} {
		t.Setenv("CPSGUARD_SIP_LISTEN", "udp://["+tc.ip+"]:5060")
		t.Setenv("CPSGUARD_SIP_ADVERTISE", tc.ip)
		t.Setenv("CPSGUARD_HTTP_LISTEN", "["+tc.ip+"]:9090")
		c, err := Parse([]byte(minimal))
		if err != nil {
			t.Fatalf("%s: %v", tc.ip, err)
		}
		if !slices.Equal(c.SIP.Listen, []string{tc.listen}) || c.SIP.Advertise != tc.advertise || c.HTTP.Listen != tc.http {
			t.Errorf("%s: sip.listen %v, sip.advertise %q, http.listen %q; want [%s], %q, %q",
				tc.ip, c.SIP.Listen, c.SIP.Advertise, c.HTTP.Listen, tc.listen, tc.advertise, tc.http)
		}
	}
	t.Setenv("CPSGUARD_SIP_ADVERTISE", "[10.20.0.5]")
	if c, err := Parse([]byte(minimal)); err != nil || c.SIP.Advertise != "10.20.0.5" {
		t.Errorf("sip.advertise [10.20.0.5]: got %v, %v", c, err)
	}
	for _, bad := range []string{"udp://[example.com]:5060", "udp://[10.20.0.5:5060", "udp://[10.20.0.5]5060", "udp://[10.20.0.500]:5060"} {
		t.Setenv("CPSGUARD_SIP_LISTEN", bad)
		if _, err := Parse([]byte(minimal)); err == nil {
			t.Errorf("sip.listen %q accepted", bad)
		}
	}
}
