package agent

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/act"
	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/judge"
	"github.com/crosstalk-project/crosstalk/internal/sense"
)

// probePolicy is the canary probes' policy as far as it finds whom to
// prove: it keeps the suspects of probe contention and the recent
// contended readings, ranks the suspects and picks where and what a proof
// of the top one reads. The proof, the throttle that follows and the
// watch between intervals are the agent's, shared with CPU wait, reached
// through proofs.
type probePolicy struct {
	// cont is the probe contention judge, shared with the agent (the
	// watch, the quiet-level calibration and the throttles read it).
	cont *judge.Contention
	susp *judge.Suspects
	// domain is each probe domain's CPUs.
	domain   map[int]cpuset.Set
	interval time.Duration
	ledger   *proofLedger
	proofs   probeProofs
	log      *slog.Logger
	// hotKind is when each probe kind last read contended: a proof reads
	// the DRAM probe if it did lately (see proofCPU).
	hotKind map[string]time.Time
	// hotCPU is each CPU's last contended reading of each kind: the LLC
	// walk reads one CPU a domain an interval, so the CPU a proof should
	// read on may have shown the contention an interval ago, not in this
	// one (see proofCPU).
	hotCPU map[cpuKind]hotReading
	// lastRatio is the last interval's contention ratio: the verdict held
	// while the probes read nothing.
	lastRatio float64
	// The watch between intervals (see watch): domains and quick are the
	// probe's domains and its cheap reading, watchN counts watches (for
	// the CPU rotation), watchKind is the probe kind it reads (DRAM where
	// the probe has it, else the first kind the intervals read), anyBusy
	// says some tenant used CPU in the last interval, and idle are the
	// CPUs the look found idle, where it reads if a domain has any (see
	// onIdle).
	domains   func() []sense.ProbeDomain
	quick     func(domain, cpu int, kind string) ([]sense.ProbeReading, error)
	watchN    int
	watchKind string
	anyBusy   bool
	idle      cpuset.Set
}

// probeProofs is what the probe policy needs of the proofs and throttles
// it shares with CPU wait: what CPU wait needs, and whether a throttled
// polluter on the contended domains can still be held tighter.
type probeProofs interface {
	waitProofs
	tighteningOn(domains []int) bool
	// heldSince is when the latest throttle of a polluter proven on the
	// probe kind began on those domains (zero if none).
	heldSince(domains []int, kind string) time.Time
	// readable reports whether the contention shows where and how a
	// proof would read it (prover.readable).
	readable(p *proof, before float64) bool
}

func newProbePolicy(cfg Config, cont *judge.Contention, domain map[int]cpuset.Set, probe Prober, quick func(domain, cpu int, kind string) ([]sense.ProbeReading, error), ledger *proofLedger, proofs probeProofs, log *slog.Logger) *probePolicy {
	var domains func() []sense.ProbeDomain
	if probe != nil {
		domains = probe.Domains
	}
	return &probePolicy{
		cont: cont, susp: judge.NewSuspects(cfg.Judge.Window), domain: domain, interval: cfg.Interval, domains: domains, quick: quick,
		ledger: ledger, proofs: proofs, log: log, hotKind: map[string]time.Time{}, hotCPU: map[cpuKind]hotReading{},
	}
}

// reconfigure takes what of cfg may change while the agent runs.
func (p *probePolicy) reconfigure(cfg Config) { p.interval = cfg.Interval }

// noteInterval notes what the watch needs of an interval's samples and
// probe readings: whether some tenant was busy, and the kind to read.
func (p *probePolicy) noteInterval(samples []sample, readings []sense.ProbeReading) {
	p.anyBusy = false
	for _, s := range samples {
		if s.usage >= minBusy {
			p.anyBusy = true
			break
		}
	}
	if p.watchKind != sense.ProbeDRAM {
		for _, r := range readings {
			if r.Kind == sense.ProbeDRAM || p.watchKind == "" {
				p.watchKind = r.Kind
			}
		}
	}
}

// noteHot keeps this interval's contended readings, by kind and by CPU.
func (p *probePolicy) noteHot(now time.Time, readings []sense.ProbeReading) {
	for _, r := range p.cont.Rate(readings) {
		if p.cont.Above(r) {
			p.hotKind[r.Kind] = now
			p.hotCPU[cpuKind{r.CPU, r.Kind}] = hotReading{at: now, domain: r.Domain, ratio: p.cont.Worst([]judge.RatedReading{r}, nil)}
		}
	}
}

// observe feeds the interval's verdict and tenants to the suspects.
func (p *probePolicy) observe(v judge.Verdict, views []judge.TenantView) { p.susp.Observe(v, views) }

// dramSign reports whether a DRAM reading of v is over its contention
// threshold (its spread's median, or its peak where strong).
func (p *probePolicy) dramSign(v judge.Verdict) bool {
	for _, r := range v.Readings {
		if r.Kind == sense.ProbeDRAM && p.cont.Above(r) {
			return true
		}
	}
	return false
}

// rank ranks the suspects of the contention v found. Tenants throttled,
// under proof, or held down by another policy already (a budget, a
// permit) are left out: proving one now would measure that throttle; so
// are those resting from a proof.
func (p *probePolicy) rank(now time.Time, v judge.Verdict, views []judge.TenantView) []judge.Suspect {
	return p.susp.Rank(v, views, p.domain, func(id string) bool {
		return p.proofs.capped(id) || p.proofs.resting(signalProbe, id, now)
	})
}

// maybeProve starts a perturbation proof on the top suspect; where none
// can be proved, on a suspect acquitted of the contention lately (see
// recheck).
func (p *probePolicy) maybeProve(ctx context.Context, now time.Time, v judge.Verdict, ranked []judge.Suspect, views []judge.TenantView, present map[string]sample) {
	if !p.proofs.mayProve(now) {
		return
	}
	// While a throttled polluter on a contended domain can still be held
	// tighter, contention there is its controller's business: proving a
	// neighbour now would blame it for what is left of the polluter.
	if p.proofs.tighteningOn(v.Domains) {
		return
	}
	order := p.proofOrder(now, ranked)
	if started, stop := p.proveFirst(ctx, now, v, order, ranked, present, false); started || stop {
		return
	}
	p.recheck(ctx, now, v, views, present)
}

// recheck proves again, early, a suspect acquitted of probe contention in
// the last recheckWindow, where the contention stayed after its acquittal
// and no suspect that is not resting can be proved: the tenants on the
// contended domains were all acquitted, and one acquittal was wrong, or
// the polluter is none of them. Each acquittal is proved early once, the
// suspects the ranking puts first first; the proof continues the
// acquittal's own evidence (takeRecheck), so the suspect's chain of
// proofs is one martingale and the bound on false convictions stays as it
// is: an innocent is acquitted again after two trials or so (its evidence
// is under 1 from the start), and a polluter acquitted on a few trials that
// missed its storm (one sharing a busy victim's CPU runs in slices of a
// few milliseconds, and a proof's freed slot can miss them) needs more
// trials to convict than a fresh proof would, not a backoff of 10 s.
//
// Not while a polluter proven on the probe is held on those domains: the
// contention left there is most likely its own, and its neighbours were
// acquitted of it. Nor where a suspect there was not acquitted lately and
// yet cannot be proved: one that waits to be proved again after an
// inconclusive proof (on the dev VM, stress-ng --lockbus in 0.3 s bursts
// ended its proofs inconclusive, and proving its acquitted neighbour again
// in each pause cost that neighbour caps for nothing), one released
// because throttling it did not help (two polluters: held one at a time,
// neither helps, and the contention is theirs), one over its proof
// allowance, or one acquitted longer ago.
func (p *probePolicy) recheck(ctx context.Context, now time.Time, v judge.Verdict, views []judge.TenantView, present map[string]sample) {
	for _, kind := range []string{sense.ProbeDRAM, sense.ProbeLLC} {
		if !p.proofs.heldSince(v.Domains, kind).IsZero() {
			return
		}
	}
	all := p.susp.Rank(v, views, p.domain, p.proofs.capped)
	for _, s := range all {
		key := backoffKey(signalProbe, s.ID)
		if p.ledger.pending(key, now) || p.proofs.resting(signalProbe, s.ID, now) && !p.ledger.acquittedLately(key, now) {
			return
		}
	}
	// A suspect's score does not depend on who else is ranked: the
	// ranking of those that may be proved again early is this one's.
	ranked := slices.DeleteFunc(all, func(s judge.Suspect) bool {
		return !p.ledger.recheckable(backoffKey(signalProbe, s.ID), s.ID, now)
	})
	if len(ranked) == 0 {
		return
	}
	p.proveFirst(ctx, now, v, ranked, ranked, present, true)
}

// proveFirst starts a proof on the first suspect of order that can be
// proved: one with a CPU to read on that it does not run on and that shows
// the contention. started says one did; stop says no suspect would fare
// better now (where it would read, the contention does not show at a
// proof's pace). recheck says the proof proves an acquittal again early
// (see recheck): it takes the acquittal's evidence to continue.
func (p *probePolicy) proveFirst(ctx context.Context, now time.Time, v judge.Verdict, order, ranked []judge.Suspect, present map[string]sample, recheck bool) (started, stop bool) {
	for _, top := range order[:min(len(order), maxProveTries)] {
		s, ok := present[top.ID]
		if !ok {
			continue
		}
		cpu, kind, ratio, ok := p.proofCPU(now, v, s.t.CPUs)
		if !ok {
			p.log.Debug("suspect not provable now: no CPU away from it reads the contention", "tenant", top.Name)
			continue
		}
		reason := fmt.Sprintf("%s; suspect score %.2f: %s", v.Reason, top.Score, strings.Join(top.Reasons, "; "))
		if recheck {
			reason += "; acquitted lately, proved again early because the contention stayed and nobody else can be proved"
		}
		pr := &proof{tenant: s.t, cpu: cpu, kind: kind, reason: reason, signal: signalProbe, recheck: recheck}
		if !p.proofs.readable(pr, ratio) {
			return false, true
		}
		if recheck {
			p.ledger.takeRecheck(backoffKey(signalProbe, top.ID), now)
		}
		p.proofs.journal(act.Event{Kind: "detection", Tenant: top.ID, Name: top.Name, Detail: reason, Evidence: DetectionEvidence{Ratio: v.Ratio, Suspects: ranked}})
		p.proofs.startProof(ctx, now, pr, ratio)
		return true, false
	}
	return false, false
}

// hotWindow is how many intervals a contended reading stays recent enough
// to choose what and where a proof reads.
const hotWindow = 4

// cpuKind is one probe kind on one CPU.
type cpuKind struct {
	cpu  int
	kind string
}

// hotReading is a CPU's last contended reading of a kind.
type hotReading struct {
	at     time.Time
	domain int
	ratio  float64
}

// leanEvidence is the evidence at which an inconclusive proof leans to
// guilt (judge.LeanEvidence).
const leanEvidence = judge.LeanEvidence

// proofOrder orders the suspects for proofs: those whose last proof ended
// inconclusive with evidence leaning to guilt (its carry at least
// leanEvidence, within carryWindow) first, most evidence first; then, in the
// ranking's order, those never proved without a conviction (see
// proofLedger.tried) and those with more than their CPU use against them;
// last, those with nothing but their CPU use against them that were proved
// without a conviction, the longest ago first.
//
// The ranking reads CPU use, and a suspect just capped half the time by
// its own proof reads idle in the windows that span it: a polluter whose
// proof went quiet would otherwise lose its turn to a bystander that
// happened to be busy. And where nothing but CPU use ranks them (a
// polluter already running when the agent started, its use tracking
// nothing), on a host with more busy tenants than one backoff holds off
// the acquitted would come back to the top before a polluter that uses
// less CPU than each of them had its turn: in the simulator's crowd
// scenario, 24 busy VMs on 16 CPUs and a split-lock VM at half their CPU
// use, running from the start, had every VM proved, then the victim and
// the VMs again, and the polluter first capped 24.2 s in, against 12.9 s
// in this order. Which suspect goes first is decided from past trials
// only, so no bound moves.
func (p *probePolicy) proofOrder(now time.Time, ranked []judge.Suspect) []judge.Suspect {
	lean := func(id string) float64 {
		return p.ledger.leaning(backoffKey(signalProbe, id), now)
	}
	// cleared puts a suspect with nothing but its CPU use against it that
	// was proved without a conviction in the last tier (1), with when;
	// every other suspect in tier 0.
	cleared := func(s judge.Suspect) (tier int, at time.Time) {
		if at, ok := p.ledger.tried(backoffKey(signalProbe, s.ID)); ok && !s.Evidence {
			return 1, at
		}
		return 0, time.Time{}
	}
	out := slices.Clone(ranked)
	slices.SortStableFunc(out, func(x, y judge.Suspect) int {
		cx, tx := cleared(x)
		cy, ty := cleared(y)
		return cmp.Or(cmp.Compare(lean(y.ID), lean(x.ID)), cmp.Compare(cx, cy), tx.Compare(ty))
	})
	return out
}

// maxProveTries is how many suspects, best first, the agent looks at for
// one it can prove.
const maxProveTries = 3

// proofCPU picks where and what a proof of a tenant on cpus reads, and the
// contention it answers to; ok false says the tenant cannot be proved now.
//
// The kind: the DRAM probe if it read contended in the last few intervals
// — it answers a cap within milliseconds, while the LLC probe shares the
// cache with whatever runs beside it and wanders (measured on the dev
// machines: a capped split-lock polluter left the DRAM probe at 1.0× and
// the LLC probe anywhere in 1-18×) — else the kind that reads worst, but
// never the locked add: a bus lock that makes it wait stalls the DRAM
// chase too, and in a VM it reads its sibling's work and the physical
// host's other guests. On the dev VM it read a split-lock storm on the
// other vCPU at 1.0× while the DRAM probe read 6×, and stress-ng --matrix
// on the other vCPU at 2.7×; the one proof read on it in a targets' set
// and the example files convicted that matrix, an innocent, whose cap
// did lift it. Contention that only it reads proves nobody.
//
// The CPU: the most contended in that kind of a contended domain that the
// tenant does not run on. Never one it runs on, where a domain has others:
// capping a tenant frees its CPU, and the probe there reads its absence —
// its own cache footprint, the CPU time it no longer takes — as relief (a
// real effect of the cap, which the proof would convict). When the CPUs
// away from it read no contention, now nor in the last hotWindow intervals
// (on a small host the other CPU may be the polluter's own, where the probe
// reads quiet because it displaces the polluter), the tenant is not
// provable now. A tenant that may run on every
// CPU of the contended domains is read where the contention is worst.
//
// The ratio: the worst of that kind on the contended domains now, at least
// the contention threshold.
func (p *probePolicy) proofCPU(now time.Time, v judge.Verdict, cpus cpuset.Set) (CPUDomain, string, float64, bool) {
	th := p.cont.Thresholds()
	kind, worst := "", 0.0
	for _, r := range v.Readings {
		if slices.Contains(v.Domains, r.Domain) && r.Kind != sense.ProbeLock {
			if x := p.cont.Worst([]judge.RatedReading{r}, nil); x > worst {
				kind, worst = r.Kind, x
			}
		}
	}
	// Contended readings from before a polluter proven on their kind was
	// held there were its own: they neither choose the kind nor the CPU
	// for a neighbour's proof. A busy neighbour's cache footprint on the
	// LLC walk of its own CPU would otherwise send its proof to the DRAM
	// probe, quiet since the conviction, and cap it for quiet trials.
	if at, ok := p.hotKind[sense.ProbeDRAM]; ok && now.Sub(at) <= hotWindow*p.interval && at.After(p.proofs.heldSince(v.Domains, sense.ProbeDRAM)) {
		kind = sense.ProbeDRAM
	}
	if kind == "" {
		return CPUDomain{}, "", 0, false
	}
	held := p.proofs.heldSince(v.Domains, kind)
	awayExists := false
	for _, d := range v.Domains {
		if !p.domain[d].Difference(cpus).IsEmpty() {
			awayExists = true
		}
	}
	var best CPUDomain
	bestRatio, found := 0.0, false
	before := th.Ratio
	for _, r := range v.Readings {
		if !slices.Contains(v.Domains, r.Domain) || r.Kind != kind {
			continue
		}
		x := p.cont.Worst([]judge.RatedReading{r}, nil)
		before = max(before, x)
		if awayExists && (cpus.Contains(r.CPU) || x < th.Ratio) {
			continue
		}
		if !found || x > bestRatio {
			best, bestRatio, found = CPUDomain{r.Domain, r.CPU}, x, true
		}
	}
	if !found && awayExists {
		// None away from it reads the contention in this interval's
		// readings; one that did lately is as good a place to read: the
		// LLC walk takes one CPU a domain an interval, in turn, so on a
		// small host the CPU away from the suspect may have read the
		// contention an interval ago while this one read the suspect's.
		for ck, h := range p.hotCPU {
			if ck.kind != kind || cpus.Contains(ck.cpu) || !slices.Contains(v.Domains, h.domain) || now.Sub(h.at) > hotWindow*p.interval || !h.at.After(held) {
				continue
			}
			if !found || h.ratio > bestRatio {
				best, bestRatio, found = CPUDomain{h.domain, ck.cpu}, h.ratio, true
			}
		}
	}
	if !found && !awayExists {
		// No reading of that kind on a contended domain this interval:
		// any CPU of one.
		for _, d := range v.Domains {
			if c := p.domain[d].List(); len(c) > 0 {
				best, found = CPUDomain{d, c[0]}, true
				break
			}
		}
	}
	return best, kind, before, found
}

// watchCPUs is how many CPUs of a domain one look of the watch reads.
const watchCPUs = 2

// watch takes cheap probe readings between intervals — two chunks of the
// DRAM kind on two CPUs of a domain, in turn — while some tenant was busy in the
// last interval (with every tenant idle there is nobody to protect yet,
// and the next interval sees whoever starts), and
// reports whether it reads contended, so that the interval runs now: a
// polluter that starts just after an interval would otherwise run free for
// most of one before anyone looks. A contended watch counts as a reading
// for persistence (judge.Contention.Mark): confirmed by that interval, the
// contention is persistent and a proof can start. It teaches the baselines nothing, and
// stays quiet while a proof or a throttle is running (acting) (the interval then
// watches closely enough), or before the first interval's readings.
func (p *probePolicy) watch(acting bool) bool {
	busy := acting || p.watchKind == "" || !p.anyBusy
	if busy {
		return false
	}
	targets := p.domains()
	if len(targets) == 0 {
		return false
	}
	p.watchN++
	d := targets[p.watchN%len(targets)]
	cpus := d.CPUs.List()
	if free := d.CPUs.Intersect(p.idle); !free.IsEmpty() {
		// Idle CPUs read the domain's contention without taking a
		// tenant's CPU, and none is a polluter's own (see onIdle).
		cpus = free.List()
	}
	if len(cpus) == 0 {
		return false
	}
	// watchCPUs CPUs of the domain a look, in turn: a probe on the
	// polluter's own CPU reads quiet (the polluter does not run while the
	// probe does), so on a small domain one CPU a look would be blind every
	// other look.
	n := min(watchCPUs, len(cpus))
	first := (p.watchN / len(targets)) * n
	var rs []sense.ProbeReading
	for k := range n {
		got, err := p.quick(d.ID, cpus[(first+k)%len(cpus)], p.watchKind)
		if err == nil {
			rs = append(rs, got...)
		}
	}
	if len(rs) == 0 {
		return false
	}
	if p.cont.Worst(p.cont.Rate(rs), nil) < p.cont.Thresholds().Ratio {
		return false
	}
	return p.cont.Mark(rs)
}
