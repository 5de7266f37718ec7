package lua

import (
	"fmt"
	"hash/fnv"

	"github.com/redis/go-redis/v9"
)

// Variants is how many versions of the scripts the nodes of a pool load:
// a node's is chosen by its node id (SetVariant).
const Variants = 64

// variant is the text every script starts with in this process
// (SetVariant); "" until it is set.
var variant string

// SetVariant makes this process's scripts one of Variants versions, chosen
// by node: the same code under a first comment line naming the variant,
// so a different SHA1. A Redis that restarted (or failed over to a replica
// that never loaded them) answers NOSCRIPT to each node's first call of
// each script, not only to the first node's (whose EVAL puts the script
// back for everyone): every node then learns that Redis may have lost the
// pool's last window (store's careful spans). Two nodes of a pool share a
// variant with probability 1/Variants; the script cache holds at most
// Variants copies of the scripts (~57 KB each), however many node ids
// come and go.
//
// SetVariant must be called once, before any script runs (serve calls it
// at start); it is not safe for concurrent use with script calls.
func SetVariant(node string) {
	h := fnv.New32a()
	_, _ = h.Write([]byte(node))
	variant = fmt.Sprintf("-- cpsguard script variant %d (lua.SetVariant)\n", h.Sum32()%Variants)
	for _, s := range allScripts {
		*s.script = redis.NewScript(variant + s.src)
	}
}
