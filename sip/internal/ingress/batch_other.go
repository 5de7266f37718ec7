//go:build !linux

package ingress

import (
	"errors"
	"net"
	"net/netip"
)

var errBatchUnsupported = errors.New("ingress: batch reads not supported on this system")

type batchReader struct{}

func newBatchReader(*net.UDPConn, int, int) (*batchReader, error) { return nil, errBatchUnsupported }

func (*batchReader) read() (int, error) { return 0, errBatchUnsupported }

func (*batchReader) datagram(int) ([]byte, netip.AddrPort, bool) { return nil, netip.AddrPort{}, false }
