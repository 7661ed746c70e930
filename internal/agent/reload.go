package agent

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/crosstalk-project/crosstalk/internal/act"
	"github.com/crosstalk-project/crosstalk/internal/api"
)

// ConfigChange is what a reload did, by YAML key (judge.ratio, protect, ...).
type ConfigChange struct {
	// Applied are the keys whose new values are in effect now.
	Applied []string
	// Restart are the keys the file changed that only a restart applies:
	// their running values stay.
	Restart []string
	// Released are the tenants released at once because the new
	// configuration protects them (the probe policy's throttle or proof;
	// the hardware policies release a protected tenant at their next
	// interval).
	Released []string
}

type reloadRequest struct {
	cfg  Config
	done chan reloadResult
}

type reloadResult struct {
	change ConfigChange
	err    error
}

// Reload hands cfg to Run's loop, which applies it between two passes (see
// Reconfigure), and returns what it changed. It waits for Run: call it
// only while Run runs.
func (a *Agent) Reload(ctx context.Context, cfg Config) (ConfigChange, error) {
	req := reloadRequest{cfg: cfg, done: make(chan reloadResult, 1)}
	select {
	case a.reloads <- req:
	case <-ctx.Done():
		return ConfigChange{}, ctx.Err()
	}
	r := <-req.done
	return r.change, r.err
}

// Reconfigure swaps in what of cfg can change while the agent runs —
// interval, max_throttled, protect, log_level, the judge's and CPU wait's
// thresholds, the proof, and the duty controller but for its period and
// steps (the throttles held are counted in them) — and reports the rest as
// needing a restart. A tenant cfg newly protects is released at once;
// throttles that still hold are kept. An invalid cfg changes nothing.
//
// Call it from the goroutine that drives the agent (Tick's caller), or
// through Reload while Run runs: only the loop may touch the agent.
func (a *Agent) Reconfigure(ctx context.Context, cfg Config) (ConfigChange, error) {
	cfg.fill()
	if err := cfg.Validate(); err != nil {
		return ConfigChange{}, err
	}
	next := a.cfg
	next.Interval = cfg.Interval
	next.MaxThrottled = cfg.MaxThrottled
	next.Protect = slices.Clone(cfg.Protect)
	next.LogLevel = cfg.LogLevel
	next.Judge.Ratio, next.Judge.Strong, next.Judge.Tolerance = cfg.Judge.Ratio, cfg.Judge.Strong, cfg.Judge.Tolerance
	next.Judge.LLCRatio, next.Judge.LLCStrong = cfg.Judge.LLCRatio, cfg.Judge.LLCStrong
	next.CPUWait.Ratio, next.CPUWait.Strong, next.CPUWait.Prove = cfg.CPUWait.Ratio, cfg.CPUWait.Strong, cfg.CPUWait.Prove
	next.CPI.Ratio, next.CPI.Strong, next.CPI.Prove = cfg.CPI.Ratio, cfg.CPI.Strong, cfg.CPI.Prove
	next.Proof = cfg.Proof
	period, steps := next.Throttle.Period, next.Throttle.Steps
	next.Throttle = cfg.Throttle
	next.Throttle.Period, next.Throttle.Steps = period, steps
	// What changes live must also make sense with what stays (a shorter
	// interval against the running kubernetes timings, a floor step
	// against the running steps).
	if err := next.Validate(); err != nil {
		return ConfigChange{}, fmt.Errorf("with the values only a restart changes kept: %w", err)
	}
	change := ConfigChange{Applied: changedKeys(a.cfg, next), Restart: changedKeys(next, cfg)}

	a.cfg = next
	a.cont.SetThresholds(next.Thresholds())
	a.wait.reconfigure(next)
	a.cpi.reconfigure(next)
	a.ledger.cfg = next.Proof
	a.probes.reconfigure(next)
	a.prover.reconfigure(next)
	a.throttles.reconfigure(next)
	now := a.d.Now()
	const why = "protected by the reloaded configuration"
	for _, id := range slices.Sorted(maps.Keys(a.throttles.throttled)) {
		t := a.throttles.throttled[id]
		if !a.cfg.protects(t.tenant) {
			continue
		}
		a.holds.release(ctx, t.tenant, why)
		delete(a.throttles.throttled, id)
		change.Released = append(change.Released, t.tenant.Name)
	}
	if p := a.prover.proof; p != nil && a.cfg.protects(p.tenant) {
		p.p.Abort(why)
		a.prover.uncap(ctx, now, p, why)
		a.prover.proof = nil
		a.rec.record(now, p.tenant, api.KindRelease, 0, 1, why+", during its proof")
		change.Released = append(change.Released, p.tenant.Name)
	}
	a.journal(act.Event{Time: now.UTC(), Kind: "reload", Detail: change.String()})
	return change, nil
}

// String says what a reload did, for the journal and the log.
func (c ConfigChange) String() string {
	list := func(s []string) string {
		if len(s) == 0 {
			return "none"
		}
		return strings.Join(s, ", ")
	}
	out := "configuration reloaded; applied: " + list(c.Applied) + "; need a restart (running values kept): " + list(c.Restart)
	if len(c.Released) > 0 {
		out += "; released, now protected: " + list(c.Released)
	}
	return out
}

// changedKeys lists, by YAML key, the leaves of the configuration that
// differ between a and b (an empty list and an absent one are alike).
func changedKeys(a, b Config) []string {
	var out []string
	diffValues(reflect.ValueOf(a), reflect.ValueOf(b), "", &out)
	return out
}

func diffValues(a, b reflect.Value, key string, out *[]string) {
	if a.Kind() == reflect.Pointer {
		if a.IsNil() || b.IsNil() {
			if a.IsNil() != b.IsNil() {
				*out = append(*out, key)
			}
			return
		}
		a, b = a.Elem(), b.Elem()
	}
	switch a.Kind() {
	case reflect.Struct:
		t := a.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if name == "-" {
				continue
			}
			k := key
			if !strings.Contains(opts, "inline") {
				if name == "" {
					name = strings.ToLower(f.Name)
				}
				if k != "" {
					k += "."
				}
				k += name
			}
			diffValues(a.Field(i), b.Field(i), k, out)
		}
	case reflect.Slice, reflect.Map:
		if a.Len() == 0 && b.Len() == 0 {
			return
		}
		if !reflect.DeepEqual(a.Interface(), b.Interface()) {
			*out = append(*out, key)
		}
	default:
		if !reflect.DeepEqual(a.Interface(), b.Interface()) {
			*out = append(*out, key)
		}
	}
}
