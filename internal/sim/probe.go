package sim

import (
	"math"
	"math/rand/v2"
	"slices"
	"sync"

	"github.com/crosstalk-project/crosstalk/internal/sense"
)

// simProber is the agent's canary probe on the simulated host: the same
// targets (CPUsPerDomain CPUs of each L3 domain per interval, rotating; the
// LLC walk on one of them) and kinds as sense.Probe, with latencies from
// the model's state on that CPU's socket.
type simProber struct {
	s       *simHost
	domains []sense.ProbeDomain
	perDom  int
	// walkSec is how long a line of the probe's buffer must stay cached
	// between its warm-up and its timed load: about one walk of the
	// buffer at L3 speed (the warm-up's independent loads overlap).
	walkSec float64
	// proofDRAMNoise scales the noise of a proof's DRAM reading: it times
	// fewer chunks than an interval's (sense.ProbeConfig.ProofChunks), and
	// a median of independent chunks scatters as one over the square root
	// of their number.
	proofDRAMNoise float64

	mu      sync.Mutex
	next    map[int]int
	llcNext map[int]int
	rng     *rand.Rand
}

func newSimProber(s *simHost, cfg sense.ProbeConfig) *simProber {
	chunks, proofChunks := cfg.ChunkCounts()
	p := &simProber{s: s, perDom: cfg.CPUsPerDomain, next: map[int]int{}, llcNext: map[int]int{}, rng: newRNG(s.sc.Seed, 0x9e0be),
		proofDRAMNoise: math.Sqrt(float64(chunks) / float64(proofChunks))}
	if p.perDom <= 0 {
		p.perDom = 2
	}
	llcBytes := cfg.LLCBytes
	if llcBytes <= 0 {
		llcBytes = 1088 << 10 // sense.Probe's default here: the L2 (1 MiB) plus 64 KiB
	}
	p.walkSec = float64(llcBytes) / lineSize * llcCycles / (float64(s.m.MaxMHz) * 1e6)
	for d := 0; d < s.m.Sockets; d++ {
		p.domains = append(p.domains, sense.ProbeDomain{ID: d, CPUs: s.m.SocketCPUs(d)})
	}
	return p
}

func (p *simProber) Domains() []sense.ProbeDomain { return slices.Clone(p.domains) }

var probeKinds = []string{sense.ProbeLock, sense.ProbeLLC, sense.ProbeDRAM}

func (p *simProber) Targets() []sense.Target {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []sense.Target
	cheap := []string{sense.ProbeLock, sense.ProbeDRAM}
	for _, d := range p.domains {
		cpus := d.CPUs.List()
		n := min(p.perDom, len(cpus))
		llc := p.llcNext[d.ID] % n
		for k := 0; k < n; k++ {
			kinds := cheap
			if k == llc {
				kinds = probeKinds
			}
			out = append(out, sense.Target{Domain: d.ID, CPU: cpus[(p.next[d.ID]+k)%len(cpus)], Kinds: kinds})
		}
		p.next[d.ID] = (p.next[d.ID] + n) % len(cpus)
		p.llcNext[d.ID]++
	}
	return out
}

func (p *simProber) Measure() ([]sense.ProbeReading, error) {
	var out []sense.ProbeReading
	for _, t := range p.Targets() {
		rs, _ := p.MeasureCPU(t.Domain, t.CPU, t.Kinds...)
		out = append(out, rs...)
	}
	return out, nil
}

// MeasureCPU returns what the canary would read on cpu now.
func (p *simProber) MeasureCPU(domain, cpu int, kinds ...string) ([]sense.ProbeReading, error) {
	return p.measure(domain, cpu, 1, kinds)
}

// MeasureOnce is what a proof reads on cpu now: as MeasureCPU, its DRAM
// reading noisier for its fewer chunks.
func (p *simProber) MeasureOnce(domain, cpu int, kinds ...string) ([]sense.ProbeReading, error) {
	return p.measure(domain, cpu, p.proofDRAMNoise, kinds)
}

// measure reads kinds on cpu, the DRAM reading's noise scaled by dramNoise.
func (p *simProber) measure(domain, cpu int, dramNoise float64, kinds []string) ([]sense.ProbeReading, error) {
	if len(kinds) == 0 {
		kinds = probeKinds
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]sense.ProbeReading, 0, len(kinds))
	for _, k := range kinds {
		ns := p.s.probeNs(cpu, k, p.walkSec)
		if n := p.s.sc.Noise; n > 0 {
			if k == sense.ProbeDRAM {
				n *= dramNoise
			}
			ns *= math.Exp(n * p.rng.NormFloat64())
		}
		out = append(out, sense.ProbeReading{Domain: domain, CPU: cpu, Kind: k, Ns: ns})
	}
	return out, nil
}

// probeNs is the model's latency of one probe kind on cpu: the locked add
// runs in the core (frequency, clock modulation) and feels bus locks a
// little; the LLC walk loses lines to eviction within a walk and waits on
// bus locks; the DRAM chase pays the socket's loaded latency and bus locks
// in full.
//
// It reads only the published state (the agent may run a probe in a
// goroutine that outlives its timeout while the simulator steps on).
func (s *simHost) probeNs(cpu int, kind string, walkSec float64) float64 {
	h := s.published.Load().Host
	sock := s.model.socket[cpu]
	ghz := float64(s.m.MaxMHz) / 1000
	U := h.BusOccupancy
	stall := 1 / (1 - U)
	switch kind {
	case sense.ProbeLock:
		f := h.CPUMHz[cpu] * h.CPUDuty[cpu]
		return probeLockNs * float64(s.m.MaxMHz) / f * (1 + probeLockBusShare*U)
	case sense.ProbeLLC:
		hit := hitCeiling
		if T := h.CharTime[sock]; !math.IsInf(T, 1) {
			hit = min(hitCeiling, math.Exp(-walkSec/T))
		}
		ns := (hit*llcCycles + (1-hit)*dramCycles*h.BWLatency[sock]) / ghz
		return ns * (1 + probeLLCLockShare*(stall-1))
	default:
		return dramCycles / ghz * h.BWLatency[sock] * stall
	}
}
