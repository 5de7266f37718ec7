package config

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
)

// PerNode lists the settings each node of a pool may set for itself: Hash
// leaves them out, so nodes that run one file with their own node_id,
// addresses and log settings show one hash. Every other setting, including
// those added later, is pool-wide by default: a hash that differs for a
// setting that did not need to agree is a false alarm, one that stays the
// same for a setting that must agree hides a split pool.
var PerNode = []string{
	"node_id",
	"sip.listen",
	"sip.advertise",
	"sip.tcp", // connection bounds are sized for the node's resources
	"http.listen",
	"log",                     // level and format: one node may be debugged alone
	"records",                 // where this node writes its call records
	"store.redis.tls.ca_file", // file paths on the node; their content is what matters
	"store.redis.tls.cert_file",
	"store.redis.tls.key_file",
}

// Hash identifies what the nodes of a pool must agree on: "sha256:" and the
// hex SHA-256 of c's JSON encoding with the PerNode settings left out, the
// store.redis.addrs sorted (the order of sentinels or cluster seeds does not
// matter) and every secret redacted (Config.Redacted), so the hash can be
// served and exported without revealing one. A secret therefore counts only
// as set or unset: two nodes with different dialog secrets show one hash.
// A nil c hashes to "".
func (c *Config) Hash() string {
	if c == nil {
		return ""
	}
	p := c.Redacted() // a copy, with its own copy of store.redis
	for _, path := range PerNode {
		// An entry that names no setting (TestPerNodePaths fails on one)
		// leaves nothing out: the hash then errs towards a false alarm.
		_ = zeroPath(reflect.ValueOf(p).Elem(), strings.Split(path, "."))
	}
	if r := p.Store.Redis; r != nil {
		r.Addrs = slices.Sorted(slices.Values(r.Addrs))
	}
	b, err := json.Marshal(p)
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// zeroPath sets the setting at path (cfg tag names, e.g. "sip", "listen")
// inside the struct v to its zero value, through pointers that are set; a
// nil pointer on the way means the setting is unset already.
func zeroPath(v reflect.Value, path []string) error {
	for i, name := range path {
		for v.Kind() == reflect.Pointer {
			if v.IsNil() {
				return nil
			}
			v = v.Elem()
		}
		if v.Kind() != reflect.Struct {
			return fmt.Errorf("%s: not a block", strings.Join(path[:i], "."))
		}
		f, ok := fieldByTag(v, name)
		if !ok {
			return fmt.Errorf("%s: no such setting", strings.Join(path[:i+1], "."))
		}
		v = f
	}
	v.SetZero()
	return nil
}

// fieldByTag returns the field of struct v whose cfg tag is name.
func fieldByTag(v reflect.Value, name string) (reflect.Value, bool) {
	t := v.Type()
	for i := range t.NumField() {
		if t.Field(i).Tag.Get("cfg") == name {
			return v.Field(i), true
		}
	}
	return reflect.Value{}, false
}
