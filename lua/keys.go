package lua

// Key builds the Redis key of one bucket or slot set. The scope and name sit
// inside a Redis Cluster hash tag, so every key of one bucket lives in one
// slot: Key("cpsguard", "peer", "dialer-1") = "cpsguard:{peer:dialer-1}".
// Names are validated by config to be safe as key parts. Package policy
// owns the scopes and is the one caller outside tests and bench.
func Key(prefix, scope, name string) string {
	return prefix + ":{" + scope + ":" + name + "}"
}

// TokenKey is the hash holding the level of the token bucket whose sorted
// set is key (see admit.lua). It keeps key's hash tag, so both share a slot.
func TokenKey(key string) string { return key + ":tokens" }
