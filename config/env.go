package config

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// ToolEnvVars are the CPSGUARD_ variables that set no configuration key
// but are read by cpsguard's commands or by its own test and benchmark
// tooling: an environment that carries them is not mistaken.
var ToolEnvVars = []string{
	"CPSGUARD_CONFIG",           // the --config default of every command
	"CPSGUARD_E2E_BINARY",       // e2e/: run the end-to-end tests against another build
	"CPSGUARD_ADAPTIVE_SECONDS", // sip/ e2e test of adaptive carriers: run length
	"CPSGUARD_ADAPTIVE_CSV",     // the same test: where to write its curve
}

// serviceLink matches the variables Kubernetes gives every pod for each
// Service of its namespace (enableServiceLinks, on by default): a Service
// named cpsguard yields CPSGUARD_SERVICE_HOST, CPSGUARD_PORT_9090_TCP_ADDR
// and so on. No configuration key starts with service or port.
// The bare <SERVICE>_PORT is recognised by its value, tcp://10.0.0.11:9090,
// so that a mistyped key ending in _port is still reported.
var (
	serviceLink     = regexp.MustCompile(`^[A-Z0-9_]+_(SERVICE_HOST|SERVICE_PORT(_[A-Z0-9_]+)?|PORT_[0-9]+_(TCP|UDP|SCTP)(_(PROTO|PORT|ADDR))?)$`)
	serviceLinkPort = regexp.MustCompile(`^[A-Z0-9_]+_PORT=(tcp|udp|sctp)://`)
)

// unknownEnv returns one message per CPSGUARD_ variable of environ that
// neither overrides a setting (EnvVars) nor is in ToolEnvVars nor is a
// Kubernetes service link, each naming the variable and the closest known
// one: CPSGUARD_HTTP_LISTN is a typo that would otherwise be silently
// ignored. Sorted by name.
func unknownEnv(environ []string) []string {
	known := map[string]int{}
	for i, name := range EnvVars() {
		known[name] = i
	}
	for i, name := range ToolEnvVars {
		known[name] = -1 - i
	}
	var out []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, EnvPrefix+"_") {
			continue
		}
		if _, ok := known[name]; ok || serviceLink.MatchString(name) || serviceLinkPort.MatchString(kv) {
			continue
		}
		out = append(out, fmt.Sprintf("%s: unknown environment variable: it sets no configuration key%s",
			name, suggest(name, known)))
	}
	slices.Sort(out)
	return out
}
