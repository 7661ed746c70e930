package judge

import (
	"fmt"
)

// CPUWait judges CPU-time contention: a tenant whose threads wait for a CPU
// far longer than they usually do. It is what two VMs pinned to one
// physical CPU do to each other — the guest sees it as steal time — and the
// signal where the memory-bus and cache probes see nothing. On the dev
// machine, two TCG guests sharing a CPU left the canary probes within their
// noise (QEMU's TCG runs a guest's split locks as ordinary host code) while
// the victim's run delay went from 0.08 to 0.98 s per second.
//
// A tenant's stretch over an interval is (CPU time + run delay) / CPU time:
// how much longer its work took than with a CPU to itself (1: it never
// waited). Its ratio is that stretch over its own quiet stretch, learned as
// the probe baselines are (judge.Baseline: quieter readings quickly, louder
// ones slowly, never while contended), so it reads on the probes' scale: 2
// means its work takes twice as long as it usually does. Run delay is summed
// over the tenant's threads (for a VM, its vCPUs' steal plus its emulator
// threads' waits), so a tenant's own quiet stretch includes its usual waits.
//
// Who causes it is left to the suspects ranking (tenants sharing the
// waiting tenant's CPUs, by activity and by how their CPU use tracks the
// waits) and to the same randomized proof as the probes' (Proof), read on
// the waiting tenant's stretch.
type CPUWait struct {
	th     Thresholds
	levels ownLevels
	// use is each tenant's CPU use while nobody waited more than usual;
	// during an episode it holds what everyone used before it began.
	use     beforeEpisode
	episode bool
	// last is each tenant's latest rating, carried while it is stale.
	last map[string]WaitRating
}

// WaitSample is one tenant's interval, in seconds per second.
type WaitSample struct {
	ID    string
	Usage float64 // CPU time used
	Delay float64 // time runnable but waiting for a CPU, summed over its threads
	// Exclude keeps the tenant out of the judgement and its baseline: one
	// crosstalk is capping, whose waits are crosstalk's doing.
	Exclude bool
	// Stale says its run delay was not read this interval (it is read in
	// turns on a busy host): its state and its last rating stand, so the
	// verdict does not flicker between its readings.
	Stale bool
	// Fair is the CPU the tenant is entitled to where every busy tenant
	// sharing its CPUs wants more (0 = unknown): a tenant that gets at
	// least that (within fairSlack) waits as the price of sharing, and is
	// no victim. Nor is one that asked for less than that (its CPU time
	// and its run delay together, what it would have run with the CPUs to
	// itself): the scheduler gives such a tenant all it asks for, later,
	// and its waits are the wake-up latency of sharing a CPU with a busy
	// neighbour, not CPU taken from it. The scheduler, not crosstalk, keeps
	// tenants that share CPUs fair.
	Fair float64
}

// WaitRating is one tenant's stretch this interval against its baseline.
type WaitRating struct {
	ID       string
	Stretch  float64
	Baseline float64
	Ratio    float64
	// Contended: over the threshold twice in a row, or strongly once.
	Contended bool
}

// WaitVerdict is the CPU-wait judgement of one interval.
type WaitVerdict struct {
	Contended bool
	// Persistent: a contended tenant was over the threshold in 2 of the
	// last 3 intervals (the agent only disturbs anyone on persistent
	// contention).
	Persistent bool
	// Ratio is the worst ratio of any judged tenant (1 = quiet).
	Ratio float64
	// Victims are the contended tenants, worst first.
	Victims []WaitRating
	// Ratings are every judged tenant's (warmed-up baseline, enough CPU use).
	Ratings []WaitRating
	Reason  string
}

// fairSlack is how far under its fair share a tenant's CPU use may be and
// still count as its fair share: the scheduler shares a CPU fairly over
// its own periods, not over every window of an interval, and three
// tenants wanting a whole CPU each read 0.32-0.34 of it, not 1/3 exactly.
const fairSlack = 0.1

// minWaitUsage is the CPU use below which a tenant's stretch is not judged:
// a nearly idle tenant's few wake-ups make its stretch noise.
const minWaitUsage = 0.05

// waitWarmup is how many quiet intervals a tenant's baseline needs before
// its waits are judged.
const waitWarmup = 4

// NewCPUWait returns a CPU-wait judge with the probes' thresholds.
func NewCPUWait(th Thresholds) *CPUWait {
	th.Fill()
	return &CPUWait{th: th, levels: newOwnLevels(waitWarmup), use: beforeEpisode{}}
}

// Thresholds returns the thresholds in use.
func (c *CPUWait) Thresholds() Thresholds { return c.th }

// Stretch is (usage + delay) / usage; ok is false when usage is too small
// to judge.
func Stretch(usage, delay float64) (float64, bool) {
	if usage < minWaitUsage || delay < 0 {
		return 0, false
	}
	return (usage + delay) / usage, true
}

// Ratio rates one window of a tenant against its baseline without learning
// from it (for proofs and for controlling a throttle); 1 when the tenant has
// no warmed-up baseline or used too little CPU to tell.
func (c *CPUWait) Ratio(id string, usage, delay float64) float64 {
	s, ok := Stretch(usage, delay)
	if !ok {
		return 1
	}
	return c.levels.ratio(id, s)
}

// Update judges an interval and learns from its quiet readings. Tenants
// absent from samples are forgotten.
func (c *CPUWait) Update(samples []WaitSample) WaitVerdict {
	v := WaitVerdict{Ratio: 1}
	seen := map[string]bool{}
	anyAbove := false
	for _, s := range samples {
		seen[s.ID] = true
		if s.Exclude {
			c.levels.skip(s.ID)
			delete(c.last, s.ID)
			continue
		}
		if s.Stale {
			if r, ok := c.last[s.ID]; ok {
				v.Ratio = max(v.Ratio, r.Ratio)
				v.Ratings = append(v.Ratings, r)
				if r.Contended {
					v.Victims = append(v.Victims, r)
					v.Persistent = v.Persistent || c.levels.recurring(s.ID)
				}
			}
			continue
		}
		stretch, ok := Stretch(s.Usage, s.Delay)
		if !ok {
			continue
		}
		o, ok := c.levels.rate(s.ID, stretch, c.th)
		if !ok {
			continue
		}
		r := WaitRating{ID: s.ID, Stretch: stretch, Baseline: o.level, Ratio: o.ratio}
		anyAbove = anyAbove || o.above
		r.Contended = o.counts &&
			!(s.Fair > 0 && s.Usage >= (1-fairSlack)*s.Fair) && !(s.Fair > 0 && s.Usage+s.Delay < s.Fair) && c.lost(s.ID, s.Usage)
		if c.last == nil {
			c.last = map[string]WaitRating{}
		}
		c.last[s.ID] = r
		v.Ratio = max(v.Ratio, r.Ratio)
		v.Ratings = append(v.Ratings, r)
		if r.Contended {
			v.Victims = append(v.Victims, r)
			v.Persistent = v.Persistent || o.recurring
		}
	}
	c.levels.forget(seen)
	for id := range c.last {
		if !seen[id] {
			delete(c.last, id)
		}
	}
	c.use.forget(seen)
	// An episode of waits begins with the first reading over the threshold
	// and lasts until every tenant is back under the tolerance. Usage is
	// learned only outside episodes, so during one it says who took more CPU
	// than before it began (see Gain).
	switch {
	case anyAbove:
		c.episode = true
	case v.Ratio < c.th.Tolerance:
		c.episode = false
	}
	if !c.episode {
		for _, s := range samples {
			if s.Exclude || s.Stale {
				continue
			}
			c.use.learn(s.ID, s.Usage)
		}
	}
	worstFirst(v.Victims, func(r WaitRating) float64 { return r.Ratio })
	v.Contended = len(v.Victims) > 0
	if v.Contended {
		w := v.Victims[0]
		v.Reason = fmt.Sprintf("CPU wait: %s's work takes %.1f× its usual time (stretch %.2f, quiet %.2f)", w.ID, w.Ratio, w.Stretch, w.Baseline)
	}
	return v
}

// minLoss is the part of its CPU a waiting tenant must have lost, against
// its use before the waits began, to be a victim.
const minLoss = 0.1

// lost reports whether a tenant uses less CPU than before the waits began
// (true when that is not known yet). A tenant that waits longer but still
// gets as much CPU as before — a service at a steady rate whose requests
// now queue a few milliseconds behind a busy neighbour — loses latency, not
// work; a vCPU whose time a neighbour takes loses work. Only the second is
// CPU-wait pollution, and throttling the neighbour for the first would
// trade its work for the other's milliseconds.
func (c *CPUWait) lost(id string, usage float64) bool {
	before, ok := c.use[id]
	return !ok || before <= 0 || usage < (1-minLoss)*before
}

// Gain is how much more CPU a tenant uses now than before the current
// episode of waits began (its usage then; all of it for a tenant that
// arrived during the episode). CPU-time contention is symmetric — two busy
// tenants on one CPU each wait for the other — and what breaks the tie is
// who changed: the tenant that took more CPU than before is the suspect, the
// one that lost CPU to it is not.
func (c *CPUWait) Gain(id string, usage float64) float64 {
	return usage - c.use[id]
}

// Baselines exports the learned quiet stretches (for the state API).
func (c *CPUWait) Baselines() map[string]Baseline { return c.levels.baselines() }

// SetThresholds replaces the thresholds (a configuration reload); the
// baselines carry on.
func (c *CPUWait) SetThresholds(th Thresholds) {
	th.Fill()
	c.th = th
}
