package config

import (
	"errors"
	"strings"
	"testing"
)

// priorityYAML is a valid configuration with priority.numbers set to
// numbers.
func priorityYAML(numbers ...string) []byte {
	return []byte(`priority:
  numbers: ["` + strings.Join(numbers, `", "`) + `"]
peers:
  - {name: dialer-1, sources: [127.0.0.1/32], cps: 50, customer: acme, customers: [acme]}
customers:
  - {name: acme, cps: 20}
carriers:
  - {name: carrier-a, uri: "sip:127.0.0.1:5070", cps: 10, max_wait: 2s}
routes:
  default: [carrier-a]
`)
}

// An entry ending in '$' is an exact number: it may stand beside the same
// number as a prefix, but not twice.
func TestPriorityExactEntries(t *testing.T) {
	if _, err := Parse(priorityYAML("911", "911$", "+44-999$")); err != nil {
		t.Fatalf("911, 911$ and +44-999$: %v", err)
	}
	_, err := Parse(priorityYAML("112$", "1-1-2$"))
	var ve *ValidationError
	if !errors.As(err, &ve) || len(ve.Errors) != 1 || !strings.Contains(ve.Errors[0], "priority.numbers[1]: duplicate of priority.numbers[0]") {
		t.Fatalf("112$ twice: got %v, want one duplicate error", err)
	}
	for entry, want := range map[string]string{"911$": "911", "911": "911", "$": "", "9$1": "9$1"} {
		exact, n := PriorityExact(entry)
		if n != want || exact != strings.HasSuffix(entry, "$") {
			t.Errorf("PriorityExact(%q) = %v, %q; want %v, %q", entry, exact, n, strings.HasSuffix(entry, "$"), want)
		}
	}
}
