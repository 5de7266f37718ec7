package lua

import (
	"context"
	_ "embed"
	"fmt"

	"github.com/redis/go-redis/v9"
)

//go:embed service.lua
var serviceSrc string

var serviceScript = redis.NewScript(serviceSrc)

// ScriptService names service.lua in observers and metrics.
const ScriptService = "service"

// ServiceEntry is one carrier out of service as service.lua stores it.
type ServiceEntry struct {
	// Carrier is the carrier's name.
	Carrier string
	// Value is the mark's encoding (cpsguard's own; the script does not
	// read it).
	Value string
}

// TakeOut stores value as carrier's mark in the hash key and returns the
// mark it replaced, if any.
func TakeOut(ctx context.Context, c redis.Scripter, key, carrier, value string) (*ServiceEntry, error) {
	if carrier == "" || value == "" {
		return nil, fmt.Errorf("%w: take out needs a carrier and a value", ErrArgs)
	}
	es, err := runService(ctx, c, key, "out", carrier, value)
	if err != nil || len(es) == 0 {
		return nil, err
	}
	return &es[0], nil
}

// PutBack removes carrier's mark from the hash key and returns it, if
// there was one.
func PutBack(ctx context.Context, c redis.Scripter, key, carrier string) (*ServiceEntry, error) {
	if carrier == "" {
		return nil, fmt.Errorf("%w: put back needs a carrier", ErrArgs)
	}
	es, err := runService(ctx, c, key, "in", carrier, "")
	if err != nil || len(es) == 0 {
		return nil, err
	}
	return &es[0], nil
}

// ListOut returns every mark of the hash key.
func ListOut(ctx context.Context, c redis.Scripter, key string) ([]ServiceEntry, error) {
	return runService(ctx, c, key, "list", "", "")
}

func runService(ctx context.Context, c redis.Scripter, key, op, carrier, value string) ([]ServiceEntry, error) {
	v, err := serviceScript.Run(ctx, c, []string{key}, op, carrier, value).Result()
	if err != nil {
		return nil, fmt.Errorf("lua: run service.lua %s for %q: %w", op, key, err)
	}
	return DecodeService(v)
}

// DecodeService decodes service.lua's reply: {carrier, value, ...}.
func DecodeService(v any) ([]ServiceEntry, error) {
	a, ok := v.([]any)
	if !ok || len(a)%2 != 0 {
		return nil, fmt.Errorf("%w: service: want an array {(carrier, value)...}, got %T %v", ErrReply, v, v)
	}
	es := make([]ServiceEntry, 0, len(a)/2)
	for i := 0; i < len(a); i += 2 {
		name, ok1 := a[i].(string)
		val, ok2 := a[i+1].(string)
		if !ok1 || !ok2 || name == "" || val == "" {
			return nil, fmt.Errorf("%w: service: want carrier, value; got %v %v", ErrReply, a[i], a[i+1])
		}
		es = append(es, ServiceEntry{Carrier: name, Value: val})
	}
	return es, nil
}
