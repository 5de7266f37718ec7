package lua

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// ScriptAdmitPace names admit_pace, the one-round-trip admission of a call
// and reservation of its first carrier slot (AdmitPace).
const ScriptAdmitPace = "admit_pace"

// admitPaceSrc is admit.lua and pace.lua, each the body of a local
// function of its own (their KEYS and ARGV are the function's parameters,
// so each script reads exactly the keys and arguments it reads alone),
// and a tail that runs pace.lua only for a call admit.lua admitted (and
// did not find a duplicate):
//
//	KEYS      admit.lua's keys, then pace.lua's four
//	ARGV[1]   the number of admit.lua's keys
//	ARGV[2]   the number of admit.lua's arguments
//	ARGV[3..] admit.lua's arguments, then pace.lua's
//
// Reply: {admit.lua's reply} when the call was refused or a duplicate,
// else {admit.lua's reply, pace.lua's reply}. An error reply of either
// script is the reply. Both scripts run in one atomic step, so the
// reservation is exactly what pace.lua alone would have made right after
// the admission: the same slots, the same pause and fair-share rules.
//
// Built from the two files at start, so it never drifts from them. Each
// function's KEYS and ARGV are cut from the script's with unpack, one
// table of the right size each: filled element by element they were
// rehashed at every power of two (and pace.lua's only when it runs).
var admitPaceSrc = "-- admit_pace: admit.lua, then pace.lua for an admitted call (lua/admit_pace.go).\n" +
	"local function admit_lua(KEYS, ARGV)\n" + admitSrc + "\nend\n" +
	"local function pace_lua(KEYS, ARGV)\n" + paceSrc + "\nend\n" + `
local nk, na = tonumber(ARGV[1]), tonumber(ARGV[2])
if not nk or not na or nk < 1 or na < 1 or #KEYS ~= nk + 4 or #ARGV <= 2 + na then
  return redis.error_reply('admit_pace: ARGV must be the key and argument counts of admit.lua, its arguments, then those of pace.lua')
end
local a = admit_lua({unpack(KEYS, 1, nk)}, {unpack(ARGV, 3, 2 + na)})
if type(a) ~= 'table' or a.err then return a end
if a[1] ~= 1 or a[3] == 1 then return {a} end
local s = pace_lua({unpack(KEYS, nk + 1, nk + 4)}, {unpack(ARGV, 3 + na)})
if type(s) ~= 'table' or s.err then return s end
return {a, s}
`

var admitPaceScript = redis.NewScript(admitPaceSrc)

// AdmitPace runs admit.lua for member over buckets and, only when it
// admits the call (not a duplicate), pace.lua's reservation pc, in one
// script: one round trip instead of two for a call that is admitted and
// sent to its first carrier (BENCHMARKS.md, F6). paced reports that pace
// ran and s is its reply. On a Cluster every key must hash to one slot
// (the caller checks, with HashSlot).
func AdmitPace(ctx context.Context, c redis.Scripter, member string, buckets []AdmitBucket, pc PaceCall) (a AdmitReply, s PaceReply, paced bool, err error) {
	akeys, aargs, err := scriptArgs(ScriptAdmit, member, true, true, buckets)
	if err != nil {
		return AdmitReply{}, PaceReply{}, false, err
	}
	if err := pc.check(); err != nil {
		return AdmitReply{}, PaceReply{}, false, err
	}
	pkeys, pargs := pc.args()
	keys := append(akeys[:len(akeys):len(akeys)], pkeys...)
	args := make([]any, 0, 2+len(aargs)+len(pargs))
	args = append(args, len(akeys), len(aargs))
	args = append(args, aargs...)
	args = append(args, pargs...)
	v, err := admitPaceScript.Run(ctx, c, keys, args...).Result()
	if err != nil {
		return AdmitReply{}, PaceReply{}, false, err
	}
	return DecodeAdmitPace(v, len(buckets))
}

// DecodeAdmitPace decodes an admit_pace reply for n buckets. It never
// panics; a reply of the wrong shape is an error wrapping ErrReply.
func DecodeAdmitPace(v any, n int) (a AdmitReply, s PaceReply, paced bool, err error) {
	parts, ok := v.([]any)
	if !ok || len(parts) < 1 || len(parts) > 2 {
		return AdmitReply{}, PaceReply{}, false, fmt.Errorf("%w: %s: %T of %d parts, want 1 or 2", ErrReply, ScriptAdmitPace, v, lenOf(v))
	}
	if a, err = DecodeAdmit(parts[0], n); err != nil {
		return AdmitReply{}, PaceReply{}, false, err
	}
	want := a.Admitted && !a.Duplicate
	if want != (len(parts) == 2) {
		return AdmitReply{}, PaceReply{}, false, fmt.Errorf("%w: %s: %d parts for admitted %v duplicate %v", ErrReply, ScriptAdmitPace, len(parts), a.Admitted, a.Duplicate)
	}
	if !want {
		return a, PaceReply{}, false, nil
	}
	if s, err = DecodePace(parts[1]); err != nil {
		return AdmitReply{}, PaceReply{}, false, err
	}
	return a, s, true, nil
}

func lenOf(v any) int {
	if s, ok := v.([]any); ok {
		return len(s)
	}
	return 0
}
