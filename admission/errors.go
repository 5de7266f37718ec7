package admission

import "fmt"

func errWindow(b Bucket) error {
	return fmt.Errorf("admission: bucket %q: window %v must be > 0", b.Key, b.Window)
}
