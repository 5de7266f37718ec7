package config

import (
	"bytes"
	"errors"
	"net/netip"
	"os"
	"reflect"
	"strings"
	"time"

	"github.com/spf13/viper"
)

// EnvPrefix starts every environment override: CPSGUARD_ + the key path in
// upper case with "_" between the parts, e.g. CPSGUARD_STORE_REDIS_PASSWORD
// for store.redis.password. Lists are given as "a,b" (or space separated).
// Lists of peers, customers and carriers and the routes map cannot be set
// from the environment.
const EnvPrefix = "CPSGUARD"

// keyDelim replaces viper's default "." key delimiter so that route names
// containing dots ("eu.premium") stay one map key.
const keyDelim = "::"

// Default returns the configuration used for every setting the file leaves
// out (DESIGN.md "Configuration"). NodeID defaults to the host name.
func Default() *Config {
	c := &Config{
		NodeID: defaultNodeID(),
		SIP: SIP{
			Listen:          []string{"udp://127.0.0.1:5060", "tcp://127.0.0.1:5060"},
			RecordRoute:     true,
			UnknownSource:   "reject",
			DialogTokenText: "auto",
			Reject:          Reject{Code: 503, Reason: "CPS Limit Exceeded"},
			RejectCalls:     Reject{Code: 503, Reason: "Call Limit Exceeded"},
			// A day-long call is rare; four hours bounds a lost BYE.
			MaxCallDuration: 4 * time.Hour,
			CallRefreshTTL:  60 * time.Second,
			InflightWait:    100 * time.Millisecond,
			DrainGrace:      5 * time.Second,
			TCP:             TCP{IdleTimeout: 60 * time.Second, MaxConnections: 10000, MaxConnectionsPerSource: 200},
			TLS:             SIPTLS{StrangerHandshakesPerSecond: 100},
		},
		Store:          Store{KeyPrefix: "cpsguard", OnError: "local"},
		HTTP:           HTTP{Listen: "127.0.0.1:9090"},
		Log:            Log{Level: "info", Format: "json", Events: true, EventsPerSecond: 200},
		Records:        Records{MaxSizeMB: 100, MaxBackups: 10, Buffer: 4096},
		CustomerHeader: "X-Customer",
		RepeatDial:     DefaultRepeatDial,
	}
	return c
}

// setDefaults fills the defaults of a block that is allocated only when the
// file has it (store.redis), or of an item of a list.
func setDefaults(p any) {
	switch b := p.(type) {
	case *Redis:
		b.Timeout = 50 * time.Millisecond
	case *Probe:
		*b = DefaultProbe
	case *Peer:
		b.Weight = 1
	case *Customer:
		b.Weight = 1
	case *Carrier:
		b.ShareBy = ShareByNone
	}
}

// Load reads the YAML file at path, applies defaults and CPSGUARD_
// environment overrides, and validates the result. A file that cannot be
// read gives an error wrapping the os error (errors.Is(err, fs.ErrNotExist)
// works); a file that can be read but is not a valid configuration gives a
// *ValidationError listing every problem.
func Load(path string) (*Config, error) {
	data, err := readFile(path)
	if err != nil {
		return nil, err
	}
	c, err := Parse(data)
	var ve *ValidationError
	if errors.As(err, &ve) {
		ve.File = path
	}
	return c, err
}

// Parse is Load on YAML already in memory. Environment overrides apply; a
// CPSGUARD_ variable that overrides no setting (and is not one of
// ToolEnvVars) is an error, with a suggestion, so a typo such as
// CPSGUARD_HTTP_LISTN is not silently ignored.
func Parse(data []byte) (*Config, error) {
	// A fresh viper per parse: viper is not safe for concurrent use, and
	// this one is never shared. Only this function reads it.
	v := viper.NewWithOptions(viper.KeyDelimiter(keyDelim))
	v.SetConfigType("yaml")
	bindEnv(v, "", reflect.TypeFor[Config]())
	errs := &errorList{}
	for _, msg := range unknownEnv(os.Environ()) {
		errs.add("", msg)
	}
	doc := yamlTree(data)
	if msgs, at := duplicateKeys(doc); len(msgs) > 0 {
		for i, m := range msgs {
			errs.addAt(at[i], m)
		}
		return nil, errs.err()
	}
	if err := v.ReadConfig(bytes.NewReader(data)); err != nil {
		msg, at := syntaxError(data, err)
		errs.addAt(at, "invalid YAML: "+msg)
		return nil, errs.err()
	}
	tree := v.AllSettings()

	pos, env := positions(doc), envOverrides()
	errs.locate = func(path string) (Position, string) { return locate(pos, env, path) }
	errs.envOnly = func(block string) []string { return envOnly(pos, env, block) }
	errs.given = func(path string) bool {
		_, inFile := pos[path]
		_, inEnv := env[settingOf(path)]
		return inFile || inEnv
	}
	if line := extraDocuments(data); line > 0 {
		errs.addAt(Position{Line: line}, "a second YAML document (after \"---\"): cpsguard reads the first only; keep one")
	}
	// store.redis left empty or null: the YAML library drops it without a
	// word, so "store: {redis: {}}" was the in-process store, each node of
	// a pool counting alone (h68). Other keys left empty (a list whose
	// items are all commented out, a setting with no value) are unset, as
	// they always were; blocks inside list items keep their place (an
	// empty reject or probe is refused by its own checks).
	if valueless(doc, "store", "redis") && !inTree(tree, "store.redis") {
		errs.add("store.redis", "empty: give its addrs (one: a standalone server; several: a Cluster; with master_name: Sentinels), "+
			"or remove it for the in-process store, where each node counts alone")
	}
	c := Default()
	d := decoder{errs: errs}
	d.decode("", tree, reflect.ValueOf(c).Elem())
	normalize(c)
	validate(c, errs)
	if ve := errs.err(); ve != nil {
		return nil, ve
	}
	c.buildIndex()
	return c, nil
}

// yamlMessage strips viper's wrapping from a YAML syntax error.
func yamlMessage(err error) string {
	msg := err.Error()
	if i := strings.Index(msg, "yaml: "); i >= 0 {
		msg = msg[i+len("yaml: "):]
	}
	return msg
}

// normalize folds route names to lower case: viper folds every map key of
// the file, so routes: {Premium: [...]} arrives as "premium", and a
// reference to "Premium" must find it. Route names are therefore
// case-insensitive.
func normalize(c *Config) {
	if c.NodeID == "" {
		// node_id: "" is the default, as DESIGN.md's example writes it.
		c.NodeID = defaultNodeID()
	}
	for i, l := range c.SIP.Listen {
		if scheme, hp, ok := strings.Cut(l, "://"); ok {
			c.SIP.Listen[i] = scheme + "://" + unbracketIPv4(hp)
		}
	}
	c.SIP.Advertise = unbracketIPv4(c.SIP.Advertise)
	c.HTTP.Listen = unbracketIPv4(c.HTTP.Listen)
	for i := range c.Peers {
		c.Peers[i].Route = strings.ToLower(c.Peers[i].Route)
	}
	for i := range c.Customers {
		c.Customers[i].Route = strings.ToLower(c.Customers[i].Route)
	}
	for i := range c.Destinations {
		c.Destinations[i].Route = strings.ToLower(c.Destinations[i].Route)
	}
}

// defaultNodeID is the host name ("cpsguard" when it has none).
func defaultNodeID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		return "cpsguard"
	}
	return host
}

// unbracketIPv4 writes "[10.0.0.7]:5060" as "10.0.0.7:5060" (and
// "[10.0.0.7]" as "10.0.0.7"); anything else is returned as it is. Brackets
// belong around IPv6 literals only, but an address templated from a host
// IP whose family is not known in advance (Kubernetes' status.hostIP in
// "udp://[$(NODE_IP)]:5060") has them either way.
func unbracketIPv4(hostport string) string {
	rest, ok := strings.CutPrefix(hostport, "[")
	if !ok {
		return hostport
	}
	host, port, ok := strings.Cut(rest, "]")
	if !ok || (port != "" && !strings.HasPrefix(port, ":")) {
		return hostport
	}
	if a, err := netip.ParseAddr(host); err != nil || !a.Is4() {
		return hostport
	}
	return host + port
}

// bindEnv binds CPSGUARD_<PATH> for every scalar or scalar-list setting of
// struct type t, so an override works even when the file lacks the key
// (viper's AutomaticEnv only sees keys it already knows).
func bindEnv(v *viper.Viper, prefix string, t reflect.Type) {
	for _, key := range envKeys(t, prefix) {
		_ = v.BindEnv(key, envName(key)) // only fails without a key, which cannot happen
	}
}

func envName(key string) string {
	return EnvPrefix + "_" + strings.ToUpper(strings.ReplaceAll(key, keyDelim, "_"))
}

// EnvVars lists every environment variable that overrides a setting, e.g.
// CPSGUARD_HTTP_LISTEN.
func EnvVars() []string {
	keys := envKeys(reflect.TypeFor[Config](), "")
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = envName(k)
	}
	return out
}

// envKeys lists the keys (joined with keyDelim) of struct type t that can be
// overridden from the environment.
func envKeys(t reflect.Type, prefix string) []string {
	var keys []string
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("cfg")
		if tag == "" {
			continue
		}
		key := tag
		if prefix != "" {
			key = prefix + keyDelim + tag
		}
		ft := f.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		switch {
		case ft == durationType:
			keys = append(keys, key)
		case ft.Kind() == reflect.Struct:
			keys = append(keys, envKeys(ft, key)...)
		case ft.Kind() == reflect.Map:
			// routes: not overridable
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
			// peers, customers, carriers: not overridable
		default:
			keys = append(keys, key)
		}
	}
	return keys
}
