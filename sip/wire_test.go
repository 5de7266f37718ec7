package sip

import (
	"flag"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"

	sipmsg "github.com/emiago/sipgo/sip"

	"github.com/cpsguard/cpsguard/internal/siptest"
	"github.com/cpsguard/cpsguard/sip/internal/wire"
)

// wireSends counts the messages the node wrote with its own writer during
// the package's tests; wireMismatches keeps the first few whose bytes were
// not sipgo's.
var (
	wireSends      atomic.Int64
	wireMu         sync.Mutex
	wireMismatches []string
)

// TestMain holds every message the proxy writes with wire.WriteUDP in
// this package's tests to sipgo's own bytes for it: any difference fails
// the run. Not in a benchmark run (-bench), whose figures would count
// sipgo's writer again.
func TestMain(m *testing.M) {
	flag.Parse()
	if f := flag.Lookup("test.bench"); f == nil || f.Value.String() == "" {
		wire.Verify = verifyWire
	}
	code := m.Run()
	wireMu.Lock()
	for _, s := range wireMismatches {
		fmt.Fprintln(os.Stderr, "FAIL: a message the node wrote differs from sipgo's bytes:", s)
		code = 1
	}
	wireMu.Unlock()
	os.Exit(code)
}

// verifyWire is wire.Verify in the package's tests.
func verifyWire(_ sipmsg.Message, got []byte, want string) {
	wireSends.Add(1)
	if string(got) == want {
		return
	}
	wireMu.Lock()
	if len(wireMismatches) < 5 {
		wireMismatches = append(wireMismatches, fmt.Sprintf("wrote\n%q\nsipgo writes\n%q", got, want))
	}
	wireMu.Unlock()
}

// TestUDPSendsUseTheNodesWriter: a UDP call's 100 Trying and the INVITE
// to the carrier go through wire.WriteUDP (the ACK and BYE relays too,
// which the package's other tests hold to sipgo's bytes).
func TestUDPSendsUseTheNodesWriter(t *testing.T) {
	if wire.Verify == nil {
		t.Skip("a benchmark run: sends are not counted (TestMain)")
	}
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	adm, pacer := newFakes()
	h := startProxy(t, testConfig(carrierCfg("a", car)), adm, pacer)
	caller := siptest.StartCaller(t, "127.0.0.2")
	before := wireSends.Load()
	answeredCall(t, caller, h.udp)
	if n := wireSends.Load() - before; n < 2 {
		t.Fatalf("%d sends of an answered call went through the node's writer, want at least 2", n)
	}
}
