package main

import (
	"errors"
	"flag"
	"io/fs"
	"os"

	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/httpapi"
)

// defaultHTTPListen is where a node listens when nothing says otherwise.
const defaultHTTPListen = "127.0.0.1:9090"

// nodeFlags are the flags of the commands that talk to a running node
// (status, probe): where to find it.
type nodeFlags struct {
	fs     *flag.FlagSet
	addr   *string
	config *string
}

func addNodeFlags(fs *flag.FlagSet) *nodeFlags {
	return &nodeFlags{
		fs: fs,
		addr: fs.String("addr", "", "operations `URL` of the node (default: from $CPSGUARD_HTTP_LISTEN, else the http.listen of\n"+
			"--config, else "+defaultHTTPListen+")"),
		config: fs.String("config", configPathFlag(), "configuration `file` whose http.listen locates the node (also $CPSGUARD_CONFIG)"),
	}
}

func (n *nodeFlags) set(name string) bool {
	found := false
	n.fs.Visit(func(f *flag.Flag) { found = found || f.Name == name })
	return found
}

// url finds the node: --addr; else $CPSGUARD_HTTP_LISTEN; else http.listen
// of the configuration file (--config, $CPSGUARD_CONFIG, or ./cpsguard.yaml
// when it exists); else 127.0.0.1:9090. A listen address on all interfaces
// is reached on loopback. A configuration file named by --config or
// $CPSGUARD_CONFIG that cannot be read is an error.
func (n *nodeFlags) url() (string, error) {
	if n.set("addr") {
		return httpapi.BaseURL(*n.addr), nil
	}
	if v := os.Getenv(config.EnvPrefix + "_HTTP_LISTEN"); v != "" {
		return httpapi.ListenURL(v), nil
	}
	named := n.set("config") || os.Getenv("CPSGUARD_CONFIG") != ""
	listen, err := config.HTTPListen(*n.config)
	switch {
	case err == nil:
		return httpapi.ListenURL(listen), nil
	case !named && errors.Is(err, fs.ErrNotExist):
		return httpapi.ListenURL(defaultHTTPListen), nil
	default:
		return "", err
	}
}

// tokenValue is a --token flag: $CPSGUARD_HTTP_TOKEN unless the flag is
// given. Its String is empty, so -h never prints the variable's value as
// the flag's default (it printed the token to a terminal or a CI log).
type tokenValue struct{ v string }

func (t *tokenValue) String() string     { return "" }
func (t *tokenValue) Set(s string) error { t.v = s; return nil }

// addTokenFlag defines --token on fs: the bearer token of the node's write
// endpoints (http.token), $CPSGUARD_HTTP_TOKEN by default.
func addTokenFlag(fs *flag.FlagSet) *string {
	t := &tokenValue{v: os.Getenv(config.EnvPrefix + "_HTTP_TOKEN")}
	fs.Var(t, "token", "bearer `token` (http.token; also $CPSGUARD_HTTP_TOKEN)")
	return &t.v
}
