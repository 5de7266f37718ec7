package lua

import "strings"

// SlotCount is the number of Redis Cluster hash slots.
const SlotCount = 16384

var crc16tab = func() (t [256]uint16) {
	for i := range t {
		crc := uint16(i) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
		t[i] = crc
	}
	return t
}()

// HashSlot is the Redis Cluster hash slot of key: CRC16 (XMODEM) of its hash tag
// (the part between the first '{' and the next '}', when not empty), or of the
// whole key, modulo 16384. Keys built by Key share a slot exactly when they
// share scope and name.
func HashSlot(key string) int {
	if s := strings.IndexByte(key, '{'); s >= 0 {
		if e := strings.IndexByte(key[s+1:], '}'); e > 0 {
			key = key[s+1 : s+1+e]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc = crc<<8 ^ crc16tab[byte(crc>>8)^key[i]]
	}
	return int(crc) % SlotCount
}
