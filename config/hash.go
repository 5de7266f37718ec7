package config

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
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
	p := c.Redacted()
	p.NodeID = ""
	p.SIP.Listen = nil
	p.SIP.Advertise = ""
	p.SIP.TCP = TCP{}
	p.HTTP.Listen = ""
	p.Log = Log{}
	if r := p.Store.Redis; r != nil { // already a copy (Redacted)
		r.Addrs = slices.Sorted(slices.Values(r.Addrs))
		r.TLS.CAFile, r.TLS.CertFile, r.TLS.KeyFile = "", "", ""
	}
	b, err := json.Marshal(p)
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}
