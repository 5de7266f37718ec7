package config

import (
	"fmt"
	"reflect"
	"slices"
)

// Changed lists the settings whose value differs between a and b, as key
// paths in the decoder's form: "sip.reject.code", "peers[1].cps",
// "routes.premium"; a list item or block present in only one of them is
// named once ("carriers[3]", "store.redis"). The paths of secrets are
// listed like the others; no value ever is. Nil when nothing changed.
func Changed(a, b *Config) []string {
	var out []string
	diff(&out, "", reflect.ValueOf(a).Elem(), reflect.ValueOf(b).Elem())
	return out
}

func diff(out *[]string, path string, a, b reflect.Value) {
	t := a.Type()
	switch {
	case t == durationType || t == prefixType:
		if !reflect.DeepEqual(a.Interface(), b.Interface()) {
			*out = append(*out, path)
		}
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		for i := range t.NumField() {
			tag := t.Field(i).Tag.Get("cfg")
			if tag == "" {
				continue
			}
			diff(out, join(path, tag), a.Field(i), b.Field(i))
		}
	case reflect.Pointer:
		switch {
		case a.IsNil() && b.IsNil():
		case a.IsNil() || b.IsNil():
			*out = append(*out, path)
		default:
			diff(out, path, a.Elem(), b.Elem())
		}
	case reflect.Slice:
		if t.Elem().Kind() != reflect.Struct {
			if !reflect.DeepEqual(a.Interface(), b.Interface()) {
				*out = append(*out, path)
			}
			return
		}
		n := min(a.Len(), b.Len())
		for i := range n {
			diff(out, fmt.Sprintf("%s[%d]", path, i), a.Index(i), b.Index(i))
		}
		for i := n; i < max(a.Len(), b.Len()); i++ {
			*out = append(*out, fmt.Sprintf("%s[%d]", path, i))
		}
	case reflect.Map:
		keys := map[string]bool{}
		for _, k := range a.MapKeys() {
			keys[k.String()] = true
		}
		for _, k := range b.MapKeys() {
			keys[k.String()] = true
		}
		names := make([]string, 0, len(keys))
		for k := range keys {
			names = append(names, k)
		}
		slices.Sort(names)
		for _, k := range names {
			key := reflect.ValueOf(k)
			x, y := a.MapIndex(key), b.MapIndex(key)
			if !x.IsValid() || !y.IsValid() || !reflect.DeepEqual(x.Interface(), y.Interface()) {
				*out = append(*out, join(path, k))
			}
		}
	default:
		if !reflect.DeepEqual(a.Interface(), b.Interface()) {
			*out = append(*out, path)
		}
	}
}
