package policy

import (
	"slices"
	"strings"

	"github.com/cpsguard/cpsguard/admission"
	"github.com/cpsguard/cpsguard/config"
)

// Destination is one destinations[] entry: its limits as a Scoped (Name
// is the prefix as configured, the metrics label; its keys are named by
// the prefix without '+') and its route.
type Destination struct {
	Scoped
	// Route is the route of the calls to the prefix ("": their
	// customer's or peer's).
	Route string
}

// deriveDestinations fills the destinations and the priority tables of p.
func (p *Policy) deriveDestinations() {
	cfg := p.cfg
	p.dests = make([]Destination, len(cfg.Destinations))
	p.destAt = make(map[string]int, len(cfg.Destinations))
	for i := range cfg.Destinations {
		d := &cfg.Destinations[i]
		name := config.DestinationNumber(config.NormalizeNumber(d.Prefix))
		p.dests[i] = Destination{
			Scoped: newScoped(cfg.Store.KeyPrefix, ScopeDestination, d.Prefix, name, d.CPS, d.Burst, d.Windows, d.MaxCalls, cfg.Shadow || d.Shadow, d.Reject),
			Route:  d.Route,
		}
		if _, dup := p.destAt[name]; !dup { // validation refuses duplicates
			p.destAt[name] = i
			if !slices.Contains(p.destLens, len(name)) {
				p.destLens = append(p.destLens, len(name))
			}
		}
	}
	slices.SortFunc(p.destLens, func(a, b int) int { return b - a })
	for _, n := range cfg.Priority.Numbers {
		if exact, n := config.PriorityExact(n); exact {
			if p.prioExact == nil {
				p.prioExact = map[string]bool{}
			}
			p.prioExact[config.NormalizeNumber(n)] = true
		} else {
			p.prioNums = append(p.prioNums, config.NormalizeNumber(n))
		}
	}
	p.prioSpace = make(map[string]bool, len(cfg.Priority.ResourcePriority))
	for _, ns := range cfg.Priority.ResourcePriority {
		p.prioSpace[strings.ToLower(ns)] = true
	}
}

// Destinations returns the destinations, index-aligned with
// Config().Destinations.
func (p *Policy) Destinations() []Destination { return p.dests }

// Destination returns the destination of a called number (as
// config.NormalizeNumber gives it): the one with the longest prefix the
// number starts with, a leading '+' ignored on both; nil when none.
func (p *Policy) Destination(number string) *Destination {
	n := config.DestinationNumber(number)
	for _, l := range p.destLens {
		if l > len(n) {
			continue
		}
		if i, ok := p.destAt[n[:l]]; ok {
			return &p.dests[i]
		}
	}
	return nil
}

// PriorityNumber reports whether a called number (config.NormalizeNumber)
// starts with one of priority.numbers, or is one of those ending in '$'
// (matched exactly), '+' significant: an emergency call.
func (p *Policy) PriorityNumber(number string) bool {
	if p.prioExact[number] {
		return true
	}
	for _, pre := range p.prioNums {
		if strings.HasPrefix(number, pre) {
			return true
		}
	}
	return false
}

// HasResourcePriority reports whether priority.resource_priority names any
// namespace (else no Resource-Priority header is a claim).
func (p *Policy) HasResourcePriority() bool { return len(p.prioSpace) > 0 }

// ResourcePriority reports whether a Resource-Priority header value (RFC
// 4412: r-values namespace "." priority, separated by commas) holds one of
// a namespace of priority.resource_priority, compared without case.
// Values of other forms are ignored.
func (p *Policy) ResourcePriority(value string) bool {
	if len(p.prioSpace) == 0 {
		return false
	}
	for len(value) > 0 {
		v := value
		if i := strings.IndexByte(value, ','); i >= 0 {
			v, value = value[:i], value[i+1:]
		} else {
			value = ""
		}
		ns, prio, ok := strings.Cut(strings.TrimSpace(v), ".")
		if !ok || ns == "" || prio == "" || len(ns) > 32 {
			continue
		}
		if p.prioSpace[strings.ToLower(ns)] {
			return true
		}
	}
	return false
}

// RepeatDial returns the repeat_dial bucket of a called number
// (config.NormalizeNumber; a leading '+' ignored): at most repeat_dial.calls
// calls in any repeat_dial.per, keyed by RepeatKey, shadowed as configured.
// False when repeat_dial is off or the number is empty.
func (p *Policy) RepeatDial(number string) (admission.Bucket, bool) {
	r := p.cfg.RepeatDial
	n := config.DestinationNumber(number)
	if r.Calls <= 0 || r.Per <= 0 || n == "" {
		return admission.Bucket{}, false
	}
	b := admission.Bucket{Key: RepeatKey(p.cfg.Store.KeyPrefix, n), Limit: r.Calls, Window: r.Per + admission.WindowGuard}
	if r.Shadow || p.cfg.Shadow {
		b.Over = admission.OverShadow
	}
	return b, true
}
