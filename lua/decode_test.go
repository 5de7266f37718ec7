package lua_test

import (
	"errors"
	"testing"

	"github.com/cpsguard/cpsguard/lua"
)

// build turns fuzz bytes into a reply-like value: arrays of int64, with
// bytes choosing odd element types, so decoders meet every shape.
func build(data []byte) any {
	if len(data) == 0 {
		return nil
	}
	switch data[0] % 4 {
	case 0:
		return int64(int8(data[0]))
	case 1:
		return string(data[1:])
	}
	arr := make([]any, 0, len(data))
	for _, b := range data[1:] {
		switch b % 7 {
		case 0:
			arr = append(arr, "x")
		case 1:
			arr = append(arr, nil)
		case 2:
			arr = append(arr, []any{int64(1)})
		default:
			arr = append(arr, int64(int8(b))/4)
		}
	}
	return arr
}

func FuzzDecodeAdmit(f *testing.F) {
	f.Add([]byte{2, 4, 4, 4, 4, 4, 8}, 1)
	f.Add([]byte{3, 4, 28, 0, 4, 4, 8, 12}, 2)
	f.Add([]byte{1, 'o', 'k'}, 1)
	f.Fuzz(func(t *testing.T, data []byte, n int) {
		n = n & 7
		r, err := lua.DecodeAdmit(build(data), n)
		if err != nil {
			if !errors.Is(err, lua.ErrReply) {
				t.Fatalf("error %v does not wrap ErrReply", err)
			}
			return
		}
		if len(r.Counts) != n || len(r.Over) != n {
			t.Fatalf("got %d counts and %d over flags, want %d", len(r.Counts), len(r.Over), n)
		}
		if r.Admitted == (r.Refused >= 0) {
			t.Fatalf("admitted %v with refused %d", r.Admitted, r.Refused)
		}
	})
}

func FuzzDecodeCounts(f *testing.F) {
	f.Add([]byte{2, 40, 4}, 1)
	f.Add([]byte{0}, 0)
	f.Fuzz(func(t *testing.T, data []byte, n int) {
		n = n & 7
		r, err := lua.DecodeCounts(build(data), n)
		if err != nil {
			if !errors.Is(err, lua.ErrReply) {
				t.Fatalf("error %v does not wrap ErrReply", err)
			}
			return
		}
		if len(r.Counts) != n {
			t.Fatalf("got %d counts, want %d", len(r.Counts), n)
		}
	})
}

func FuzzDecodePace(f *testing.F) {
	f.Add([]byte{2, 4, 40, 44})
	f.Add([]byte{3, 3, 3, 3})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := lua.DecodePace(build(data))
		if err != nil {
			if !errors.Is(err, lua.ErrReply) {
				t.Fatalf("error %v does not wrap ErrReply", err)
			}
			return
		}
		if r.WaitUS < 0 || (r.Paused && (r.OK || r.Probe || r.Booked)) || (r.Probe && (!r.OK || r.Booked)) || (r.Booked && !r.OK) {
			t.Fatalf("accepted %+v", r)
		}
	})
}

func FuzzDecodeQueue(f *testing.F) {
	f.Add([]byte{2, 40, 8, 12, 3})
	f.Add([]byte{0})
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := lua.DecodeQueue(build(data))
		if err != nil {
			if !errors.Is(err, lua.ErrReply) {
				t.Fatalf("error %v does not wrap ErrReply", err)
			}
			return
		}
		if r.Queued < 0 || r.WaitUS < 0 || r.Sent < 0 {
			t.Fatalf("negative queue %+v", r)
		}
	})
}

func FuzzDecodeRelease(f *testing.F) {
	f.Add([]byte{0})
	f.Add([]byte{4})
	f.Fuzz(func(t *testing.T, data []byte) {
		if _, err := lua.DecodeRelease(build(data)); err != nil && !errors.Is(err, lua.ErrReply) {
			t.Fatalf("error %v does not wrap ErrReply", err)
		}
	})
}

func FuzzDecodePause(f *testing.F) {
	f.Add([]byte{2, 4, 40, 4, 44, 0, 4, 4})
	f.Add([]byte{2, 4, 40, 8, 44, 0, 4, 4})
	f.Add([]byte{0})
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := lua.DecodePause(build(data))
		if err != nil {
			if !errors.Is(err, lua.ErrReply) {
				t.Fatalf("error %v does not wrap ErrReply", err)
			}
			return
		}
		if r.UntilUS < 0 || r.SinceUS < 0 || r.NowUS < 0 || (r.Paused && r.SinceUS > r.UntilUS) {
			t.Fatalf("accepted %+v", r)
		}
	})
}

func TestDecodePause(t *testing.T) {
	r, err := lua.DecodePause([]any{int64(1), int64(50), int64(10), int64(20), "why", int64(1), int64(0)})
	if err != nil || !r.Paused || r.UntilUS != 50 || r.SinceUS != 10 || r.NowUS != 20 || r.Reason != "why" || !r.Probing || r.Changed {
		t.Errorf("got %+v, %v", r, err)
	}
	for _, v := range []any{
		nil, int64(1),
		[]any{int64(1), int64(50), int64(10), int64(20), "why", int64(1)},              // short
		[]any{int64(2), int64(50), int64(10), int64(20), "why", int64(1), int64(0)},    // bad flag
		[]any{int64(1), int64(5), int64(10), int64(20), "why", int64(1), int64(0)},     // since after until
		[]any{int64(1), int64(50), int64(10), int64(20), int64(3), int64(1), int64(0)}, // reason not text
		[]any{int64(0), int64(-1), int64(0), int64(20), "", int64(0), int64(0)},        // negative time
		[]any{int64(0), int64(0), int64(0), int64(20), "", int64(0), "1"},              // changed not a number
	} {
		if _, err := lua.DecodePause(v); !errors.Is(err, lua.ErrReply) {
			t.Errorf("DecodePause(%v): %v, want ErrReply", v, err)
		}
	}
}

func FuzzDecodeEvidence(f *testing.F) {
	f.Add([]byte{2, 4, 8, 40})
	f.Add([]byte{2, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := lua.DecodeEvidence(build(data))
		if err != nil {
			if !errors.Is(err, lua.ErrReply) {
				t.Fatalf("error %v does not wrap ErrReply", err)
			}
			return
		}
		if r.Callers < 1 || r.Overloaded < 0 || r.NowUS < 0 {
			t.Fatalf("accepted %+v", r)
		}
	})
}

func TestDecodeAdmit(t *testing.T) {
	for _, tc := range []struct {
		name    string
		v       any
		n       int
		wantErr bool
	}{
		{"admitted", []any{int64(1), int64(-1), int64(0), int64(5), int64(0), int64(3), int64(0)}, 1, false},
		{"admitted over a counting bucket", []any{int64(1), int64(-1), int64(0), int64(5), int64(0), int64(3), int64(1)}, 1, false},
		{"refused", []any{int64(0), int64(1), int64(0), int64(5), int64(7), int64(3), int64(5), int64(0), int64(1)}, 2, false},
		{"nil", nil, 1, true},
		{"short", []any{int64(1)}, 1, true},
		{"no over flags", []any{int64(1), int64(-1), int64(0), int64(5), int64(0), int64(3)}, 1, true},
		{"string element", []any{int64(1), int64(-1), "0", int64(5), int64(0), int64(3), int64(0)}, 1, true},
		{"refused index out of range", []any{int64(0), int64(3), int64(0), int64(5), int64(7), int64(3), int64(1)}, 1, true},
		{"admitted with refused index", []any{int64(1), int64(0), int64(0), int64(5), int64(0), int64(3), int64(0)}, 1, true},
		{"bad flag", []any{int64(2), int64(-1), int64(0), int64(5), int64(0), int64(3), int64(0)}, 1, true},
		{"bad over flag", []any{int64(1), int64(-1), int64(0), int64(5), int64(0), int64(3), int64(2)}, 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := lua.DecodeAdmit(tc.v, tc.n)
			if (err != nil) != tc.wantErr {
				t.Fatalf("got err %v, want error %v", err, tc.wantErr)
			}
		})
	}
}

func FuzzDecodeRate(f *testing.F) {
	f.Add([]byte{2, 40, 8, 4, 4}, int64(1), int64(100))
	f.Add([]byte{3, 3, 3, 3}, int64(0), int64(0))
	f.Fuzz(func(t *testing.T, data []byte, minM, maxM int64) {
		r, err := lua.DecodeRate(build(data), minM, maxM)
		if err != nil {
			if !errors.Is(err, lua.ErrReply) {
				t.Fatalf("error %v does not wrap ErrReply", err)
			}
			return
		}
		if r.RateM < minM || r.RateM > maxM || r.NowUS < 0 {
			t.Fatalf("accepted %+v outside [%d, %d]", r, minM, maxM)
		}
	})
}

func FuzzDecodeRefund(f *testing.F) {
	f.Add([]byte{0}, 2)
	f.Add([]byte{4}, 1)
	f.Add([]byte{2, 4}, 1)
	f.Fuzz(func(t *testing.T, data []byte, n int) {
		n = n & 7
		r, err := lua.DecodeRefund(build(data), n)
		if err != nil {
			if !errors.Is(err, lua.ErrReply) {
				t.Fatalf("error %v does not wrap ErrReply", err)
			}
			return
		}
		if r < 0 || r > n {
			t.Fatalf("removed %d accepted for %d buckets", r, n)
		}
	})
}

func TestDecodeRefund(t *testing.T) {
	if r, err := lua.DecodeRefund(int64(2), 3); err != nil || r != 2 {
		t.Errorf("got %d, %v; want 2", r, err)
	}
	for _, v := range []any{nil, int64(-1), int64(4), "1", []any{int64(1)}} {
		if _, err := lua.DecodeRefund(v, 3); !errors.Is(err, lua.ErrReply) {
			t.Errorf("DecodeRefund(%v): %v, want ErrReply", v, err)
		}
	}
}

func FuzzDecodeOverrides(f *testing.F) {
	f.Add([]byte{2, 4})
	f.Add([]byte{2, 4, 0, 8, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		es, err := lua.DecodeOverrides(build(data))
		if err != nil {
			if !errors.Is(err, lua.ErrReply) {
				t.Fatalf("error %v does not wrap ErrReply", err)
			}
			return
		}
		for _, e := range es {
			if e.Field == "" || e.Value == "" || e.Left < 0 {
				t.Fatalf("decoded an invalid entry %+v", e)
			}
		}
	})
}

func TestDecodeOverrides(t *testing.T) {
	for _, tc := range []struct {
		name  string
		reply any
		want  int // entries; -1: ErrReply
	}{
		{"none", []any{int64(1700000000000)}, 0},
		{"one", []any{int64(1), "peer/d", int64(1500), `{"cps":20}`}, 1},
		{"not an array", "x", -1},
		{"empty", []any{}, -1},
		{"short entry", []any{int64(1), "peer/d", int64(1500)}, -1},
		{"negative left", []any{int64(1), "peer/d", int64(-1), "v"}, -1},
		{"empty value", []any{int64(1), "peer/d", int64(5), ""}, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			es, err := lua.DecodeOverrides(tc.reply)
			if tc.want < 0 {
				if !errors.Is(err, lua.ErrReply) {
					t.Errorf("got %v, %v; want ErrReply", es, err)
				}
				return
			}
			if err != nil || len(es) != tc.want {
				t.Errorf("got %v, %v; want %d entries", es, err, tc.want)
			}
		})
	}
	if es, _ := lua.DecodeOverrides([]any{int64(1), "peer/d", int64(1500), "v"}); es[0].Left.Milliseconds() != 1500 {
		t.Errorf("left = %v, want 1.5s", es[0].Left)
	}
}

func FuzzDecodeOccupy(f *testing.F) {
	f.Add([]byte{2, 4, 4, 0, 40, 4}, 1)
	f.Add([]byte{3, 0, 4, 0, 40, 4, 8}, 2)
	f.Fuzz(func(t *testing.T, data []byte, n int) {
		n = n & 7
		r, err := lua.DecodeOccupy(build(data), n)
		if err != nil {
			if !errors.Is(err, lua.ErrReply) {
				t.Fatalf("error %v does not wrap ErrReply", err)
			}
			return
		}
		if len(r.Counts) != n {
			t.Fatalf("got %d counts, want %d", len(r.Counts), n)
		}
		if r.Admitted == (r.Refused >= 0) {
			t.Fatalf("admitted %v with refused %d", r.Admitted, r.Refused)
		}
		if r.Duplicate && !r.Admitted {
			t.Fatal("duplicate but not admitted")
		}
	})
}

func FuzzDecodeFree(f *testing.F) {
	f.Add([]byte{0}, 2)
	f.Add([]byte{2, 4}, 1)
	f.Fuzz(func(t *testing.T, data []byte, n int) {
		n = n & 7
		x, err := lua.DecodeFree(build(data), n)
		if err != nil {
			if !errors.Is(err, lua.ErrReply) {
				t.Fatalf("error %v does not wrap ErrReply", err)
			}
			return
		}
		if x < 0 || x > int64(n) {
			t.Fatalf("freed %d of %d places", x, n)
		}
	})
}

func FuzzDecodeRefresh(f *testing.F) {
	f.Add([]byte{4, 2, 1, 8, 40}, 3)
	f.Add([]byte{4, 0, 0, 0, 0}, 0)
	f.Fuzz(func(t *testing.T, data []byte, n int) {
		n = n & 7
		r, err := lua.DecodeRefresh(build(data), n)
		if err != nil {
			if !errors.Is(err, lua.ErrReply) {
				t.Fatalf("error %v does not wrap ErrReply", err)
			}
			return
		}
		if r.Refreshed < 0 || r.Restored < 0 || r.Refreshed+r.Restored != int64(n) || r.Live < int64(n) {
			t.Fatalf("refreshed %d and restored %d of %d, live %d", r.Refreshed, r.Restored, n, r.Live)
		}
	})
}

func TestDecodeEnded(t *testing.T) {
	for _, tc := range []struct {
		name string
		v    any
		ok   bool
	}{
		{"none", []any{int64(10), int64(11), int64(0)}, true},
		{"two ends, more", []any{int64(10), int64(9), int64(1), "aa", "bb"}, true},
		{"not an array", int64(1), false},
		{"short", []any{int64(10), int64(11)}, false},
		{"negative time", []any{int64(-1), int64(0), int64(0)}, false},
		{"more not a flag", []any{int64(10), int64(11), int64(2)}, false},
		{"cursor past now", []any{int64(10), int64(12), int64(0)}, false},
		{"end not a string", []any{int64(10), int64(11), int64(0), int64(5)}, false},
		{"over the page", []any{int64(10), int64(11), int64(0), "a", "b", "c"}, false},
	} {
		r, err := lua.DecodeEnded(tc.v, 2)
		if (err == nil) != tc.ok {
			t.Errorf("%s: %+v, %v; want ok %v", tc.name, r, err, tc.ok)
		}
		if err != nil && !errors.Is(err, lua.ErrReply) {
			t.Errorf("%s: error %v does not wrap ErrReply", tc.name, err)
		}
	}
}

func FuzzDecodeEnded(f *testing.F) {
	f.Add([]byte{2, 40, 44, 0, 0}, int64(2))
	f.Fuzz(func(t *testing.T, data []byte, page int64) {
		r, err := lua.DecodeEnded(build(data), page)
		if err == nil && (int64(len(r.Ends)) > page || r.Next > r.NowUS+1) {
			t.Fatalf("accepted %+v for page %d", r, page)
		}
	})
}
func FuzzDecodeLive(f *testing.F) {
	f.Add([]byte{2, 4})
	f.Add([]byte{2, 4, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		v := build(data)
		if n, err := lua.DecodeLiveCount(v); err != nil {
			if !errors.Is(err, lua.ErrReply) {
				t.Fatalf("count: error %v does not wrap ErrReply", err)
			}
		} else if n < 0 {
			t.Fatalf("count: decoded %d", n)
		}
		es, err := lua.DecodeLiveList(v)
		if err != nil {
			if !errors.Is(err, lua.ErrReply) {
				t.Fatalf("list: error %v does not wrap ErrReply", err)
			}
			return
		}
		for _, e := range es {
			if e.ID == "" || e.Value == "" {
				t.Fatalf("decoded an invalid entry %+v", e)
			}
		}
	})
}

func TestDecodeLive(t *testing.T) {
	if es, err := lua.DecodeLiveList([]any{int64(5), "a", "{}", "b", "{}"}); err != nil || len(es) != 2 || es[1].ID != "b" {
		t.Errorf("list: got %v, %v", es, err)
	}
	for _, v := range []any{nil, []any{}, []any{int64(1), "a"}, []any{int64(1), "", "x"}, []any{"x"}} {
		if _, err := lua.DecodeLiveList(v); !errors.Is(err, lua.ErrReply) {
			t.Errorf("DecodeLiveList(%v): %v, want ErrReply", v, err)
		}
	}
	if n, err := lua.DecodeLiveCount([]any{int64(5), int64(2)}); err != nil || n != 2 {
		t.Errorf("count: got %d, %v", n, err)
	}
	if _, err := lua.DecodeLiveCount([]any{int64(5), int64(-2)}); !errors.Is(err, lua.ErrReply) {
		t.Errorf("negative count: %v, want ErrReply", err)
	}
}

func FuzzDecodeService(f *testing.F) {
	f.Add([]byte{4, 4})
	f.Add([]byte{4, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		es, err := lua.DecodeService(build(data))
		if err != nil {
			if !errors.Is(err, lua.ErrReply) {
				t.Fatalf("error %v does not wrap ErrReply", err)
			}
			return
		}
		for _, e := range es {
			if e.Carrier == "" || e.Value == "" {
				t.Fatalf("decoded an invalid entry %+v", e)
			}
		}
	})
}

func TestDecodeService(t *testing.T) {
	for _, tc := range []struct {
		name  string
		reply any
		want  int // entries; -1: ErrReply
	}{
		{"none", []any{}, 0},
		{"one", []any{"a", `{"by":"x"}`}, 1},
		{"two", []any{"a", "v", "b", "w"}, 2},
		{"not an array", "x", -1},
		{"odd", []any{"a"}, -1},
		{"empty value", []any{"a", ""}, -1},
		{"empty name", []any{"", "v"}, -1},
		{"number", []any{"a", int64(1)}, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			es, err := lua.DecodeService(tc.reply)
			if tc.want < 0 {
				if !errors.Is(err, lua.ErrReply) {
					t.Errorf("got %v, %v; want ErrReply", es, err)
				}
				return
			}
			if err != nil || len(es) != tc.want {
				t.Errorf("got %v, %v; want %d entries", es, err, tc.want)
			}
		})
	}
}

// FuzzDecodeAdmitPace: an admit_pace reply of any shape is decoded or
// refused with ErrReply, never a panic; a decoded one has a pace reply
// exactly when its admission admitted a call that is not a duplicate.
func FuzzDecodeAdmitPace(f *testing.F) {
	f.Add([]byte{2, 1, 6, 0, 7, 0, 7, 0}, []byte{2, 1, 0, 7, 0}, true)
	f.Add([]byte{2, 0, 0, 0, 7, 7, 7, 7}, []byte{}, false)
	f.Add([]byte{1, 'x'}, []byte{0}, true)
	f.Fuzz(func(t *testing.T, admit, pace []byte, two bool) {
		if _, _, _, err := lua.DecodeAdmitPace(build(admit), 1); err != nil && !errors.Is(err, lua.ErrReply) {
			t.Fatalf("error %v does not wrap ErrReply", err)
		}
		v := []any{build(admit)}
		if two {
			v = append(v, build(pace))
		}
		a, _, paced, err := lua.DecodeAdmitPace(v, 1)
		if err != nil {
			if !errors.Is(err, lua.ErrReply) {
				t.Fatalf("error %v does not wrap ErrReply", err)
			}
			return
		}
		if paced != (a.Admitted && !a.Duplicate) {
			t.Fatalf("paced %v for admitted %v duplicate %v", paced, a.Admitted, a.Duplicate)
		}
	})
}

func FuzzDecodeRespace(f *testing.F) {
	f.Add([]byte{2, 40, 4})
	f.Add([]byte{3, 3, 40})
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := lua.DecodeRespace(build(data))
		if err != nil {
			if !errors.Is(err, lua.ErrReply) {
				t.Fatalf("error %v does not wrap ErrReply", err)
			}
			return
		}
		if r.NowUS < 0 || r.Removed < 0 {
			t.Fatalf("accepted %+v", r)
		}
	})
}
