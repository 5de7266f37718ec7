// Package lua holds the Redis Lua scripts of cpsguard, embedded, with one typed
// Go wrapper per script.
package lua
