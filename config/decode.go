package config

import (
	"fmt"
	"math"
	"net/netip"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
)

// decoder turns the generic tree read by viper (maps, lists, scalars; env
// overrides arrive as strings) into a Config, strictly: every key must be
// known, every value must have the right type. It does not stop at the first
// problem: each one is recorded with its path and decoding goes on, so the
// user sees every error at once. Paths that failed to decode are remembered
// so validation does not pile a second, misleading error on them.
type decoder struct {
	errs *errorList
}

var (
	durationType     = reflect.TypeFor[time.Duration]()
	prefixType       = reflect.TypeFor[netip.Prefix]()
	routeType        = reflect.TypeFor[Route]()
	routeCarrierType = reflect.TypeFor[RouteCarrier]()
)

// got formats an offending value for a message: strings quoted, maps and
// lists named rather than dumped.
func got(v any) string {
	switch v := v.(type) {
	case string:
		return strconv.Quote(v)
	case map[string]any, []any, nil:
		return kindOf(v)
	}
	return fmt.Sprint(v)
}

// kindOf names the kind of a decoded value without showing it.
func kindOf(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case map[string]any:
		return "a map"
	case []any:
		return "a list"
	case nil:
		return "nothing"
	case bool:
		return "a boolean"
	case int, int32, int64, uint, uint32, uint64, float32, float64:
		return "a number"
	}
	return "a value of another kind"
}

// secretKeys are the last path elements of settings whose values are
// secrets: their values never appear in a message, whatever they are.
var secretKeys = map[string]bool{"password": true, "token": true, "dialog_secret": true, "secret": true}

// isSecretPath reports whether path names a secret setting
// (store.redis.password, http.token, sip.dialog_secret, …).
func isSecretPath(path string) bool {
	if i := strings.LastIndexByte(path, '.'); i >= 0 {
		path = path[i+1:]
	}
	return secretKeys[path]
}

// gotAt is got for the value at path: for a secret only its kind ("a
// number"), never the value, so a secret mistyped in a file or an
// environment variable is not echoed by check, the logs or the reload API.
func gotAt(path string, v any) string {
	if isSecretPath(path) {
		return kindOf(v)
	}
	return got(v)
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func (d *decoder) fail(path, format string, args ...any) {
	d.errs.addDecode(path, fmt.Sprintf(format, args...))
}

// decode stores in into out (addressable). path names out in messages.
func (d *decoder) decode(path string, in any, out reflect.Value) {
	t := out.Type()
	switch {
	case t == durationType:
		dur, ok := toDuration(in)
		if !ok {
			d.fail(path, "must be a duration like 2s or 500ms (got %s)", gotAt(path, in))
			return
		}
		out.SetInt(int64(dur))
		return
	case t == prefixType:
		s, ok := in.(string)
		if !ok {
			d.fail(path, "must be a CIDR like 192.0.2.0/24 (got %s)", gotAt(path, in))
			return
		}
		pfx, err := parsePrefix(s)
		if err != nil {
			d.fail(path, "%v", err)
			return
		}
		out.Set(reflect.ValueOf(pfx))
		return
	case t == routeType:
		// A list of names (ordered), or a block {policy, carriers}.
		if items, ok := in.([]any); ok {
			r := Route{list: true}
			d.decodeSlice(path, items, reflect.ValueOf(&r.Carriers).Elem())
			out.Set(reflect.ValueOf(r))
			return
		}
		if _, ok := in.(map[string]any); !ok {
			d.fail(path, "must be a list of carrier names or a block {policy, carriers} (got %s)", gotAt(path, in))
			return
		}
		d.decodeStruct(path, in, out)
		return
	case t == routeCarrierType:
		// A name, or a block {name, weight}.
		if name, ok := in.(string); ok {
			out.Set(reflect.ValueOf(RouteCarrier{Name: name}))
			return
		}
		if _, ok := in.(map[string]any); !ok {
			d.fail(path, "must be a carrier name or a block {name, weight} (got %s)", gotAt(path, in))
			return
		}
		d.decodeStruct(path, in, out)
		return
	}
	switch t.Kind() {
	case reflect.String:
		switch v := in.(type) {
		case string:
			out.SetString(v)
		case int, int64, uint64:
			// An unquoted number in YAML where text is expected (a name
			// like 1234): take its text rather than fail.
			out.SetString(fmt.Sprint(v))
		default:
			d.fail(path, "must be a string (got %s)", gotAt(path, in))
		}
	case reflect.Bool:
		switch v := in.(type) {
		case bool:
			out.SetBool(v)
		case string:
			b, err := strconv.ParseBool(v)
			if err != nil {
				d.fail(path, "must be true or false (got %s)", gotAt(path, in))
				return
			}
			out.SetBool(b)
		default:
			d.fail(path, "must be true or false (got %s)", gotAt(path, in))
		}
	case reflect.Int:
		n, ok := toInt(in)
		if !ok {
			d.fail(path, "must be an integer (got %s)", gotAt(path, in))
			return
		}
		out.SetInt(n)
	case reflect.Float64:
		f, ok := toFloat(in)
		if !ok {
			d.fail(path, "must be a number (got %s)", gotAt(path, in))
			return
		}
		out.SetFloat(f)
	case reflect.Slice:
		d.decodeSlice(path, in, out)
	case reflect.Map:
		d.decodeMap(path, in, out)
	case reflect.Struct:
		d.decodeStruct(path, in, out)
	case reflect.Pointer:
		v := reflect.New(t.Elem())
		setDefaults(v.Interface())
		d.decode(path, in, v.Elem())
		out.Set(v)
	default:
		panic(fmt.Sprintf("config: no decoder for %s at %s", t, path)) // programming error, caught by tests
	}
}

func (d *decoder) decodeSlice(path string, in any, out reflect.Value) {
	var items []any
	switch v := in.(type) {
	case []any:
		items = v
	case string:
		// Environment overrides carry lists as text: "a,b" or "a b".
		if k := out.Type().Elem().Kind(); k == reflect.Struct || k == reflect.Slice {
			d.fail(path, "must be a list (got %s)", gotAt(path, in))
			return
		}
		for _, f := range strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' }) {
			items = append(items, f)
		}
	default:
		d.fail(path, "must be a list (got %s)", gotAt(path, in))
		return
	}
	s := reflect.MakeSlice(out.Type(), len(items), len(items))
	for i, item := range items {
		if s.Index(i).Kind() == reflect.Struct {
			setDefaults(s.Index(i).Addr().Interface())
		}
		d.decode(fmt.Sprintf("%s[%d]", path, i), item, s.Index(i))
	}
	out.Set(s)
}

func (d *decoder) decodeMap(path string, in any, out reflect.Value) {
	m, ok := in.(map[string]any)
	if !ok {
		d.fail(path, "must be a map (got %s)", gotAt(path, in))
		return
	}
	res := reflect.MakeMapWithSize(out.Type(), len(m))
	for _, k := range sortedKeys(m) {
		v := reflect.New(out.Type().Elem()).Elem()
		d.decode(join(path, k), m[k], v)
		res.SetMapIndex(reflect.ValueOf(k), v)
	}
	out.Set(res)
}

func (d *decoder) decodeStruct(path string, in any, out reflect.Value) {
	m, ok := in.(map[string]any)
	if !ok {
		d.fail(path, "must be a map (got %s)", gotAt(path, in))
		return
	}
	fields := fieldsOf(out.Type())
	for _, k := range sortedKeys(m) {
		i, ok := fields[k]
		if !ok {
			d.fail(join(path, k), "unknown key%s", suggest(k, fields))
			continue
		}
		d.decode(join(path, k), m[k], out.Field(i))
	}
}

// fieldsOf maps the `cfg` tag of each field of struct type t to its index.
func fieldsOf(t reflect.Type) map[string]int {
	m := map[string]int{}
	for i := range t.NumField() {
		if tag := t.Field(i).Tag.Get("cfg"); tag != "" {
			m[tag] = i
		}
	}
	return m
}

// suggest names the closest known key when k looks like a typo of it.
func suggest(k string, fields map[string]int) string {
	best, bestD := "", 3
	for f := range fields {
		if d := distance(k, f); d < bestD || (d == bestD && f < best) {
			best, bestD = f, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

// distance is the Levenshtein distance with adjacent transpositions counted
// as one edit (max_wiat -> max_wait is 1).
func distance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func toDuration(in any) (time.Duration, bool) {
	switch v := in.(type) {
	case string:
		d, err := time.ParseDuration(strings.TrimSpace(v))
		return d, err == nil
	case int:
		// A bare 0 is unambiguous; any other bare number has no unit.
		return 0, v == 0
	case float64:
		return 0, v == 0
	}
	return 0, false
}

func toInt(in any) (int64, bool) {
	switch v := in.(type) {
	case int:
		return int64(v), true
	case int64:
		return v, true
	case uint64:
		return int64(v), v <= math.MaxInt64
	case float64:
		return int64(v), v == math.Trunc(v) && math.Abs(v) < 1<<53
	case string:
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		return n, err == nil
	}
	return 0, false
}

func toFloat(in any) (float64, bool) {
	switch v := in.(type) {
	case int:
		return float64(v), true
	case int64:
		return float64(v), true
	case uint64:
		return float64(v), true
	case float64:
		return v, true
	case string:
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		return f, err == nil
	}
	return 0, false
}

// parsePrefix accepts a CIDR or a bare address (a single host). A prefix
// with host bits set (10.0.0.1/24) is refused rather than silently masked:
// it is usually a typo for a /32 or for the network address.
func parsePrefix(s string) (netip.Prefix, error) {
	s = strings.TrimSpace(s)
	if !strings.Contains(s, "/") {
		a, err := netip.ParseAddr(s)
		if err != nil || a.Zone() != "" {
			return netip.Prefix{}, fmt.Errorf("invalid CIDR %q: want a network like 192.0.2.0/24 or an address", s)
		}
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("invalid CIDR %q: want a network like 192.0.2.0/24", s)
	}
	if p.Masked() != p {
		return netip.Prefix{}, fmt.Errorf("invalid CIDR %q: host bits are set (network is %s)", s, p.Masked())
	}
	return p, nil
}
