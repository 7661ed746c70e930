package agent

import "github.com/crosstalk-project/crosstalk/internal/judge"

// DetectionEvidence is what a detection event carries: the contention
// that raised it and every suspect ranked. `crosstalk explain` reads it
// back, so the shape is the journal's contract.
type DetectionEvidence struct {
	// Ratio is the probes' contention ratio, for a probe detection.
	Ratio float64 `json:"ratio,omitempty"`
	// CPUWaitRatio and Victims are the tenants' CPU wait, for a CPU-wait
	// detection.
	CPUWaitRatio float64            `json:"cpu_wait_ratio,omitempty"`
	Victims      []judge.WaitRating `json:"victims,omitempty"`
	// CPIRatio and CPIVictims are the tenants' CPI, for a CPI detection.
	CPIRatio   float64           `json:"cpi_ratio,omitempty"`
	CPIVictims []judge.CPIRating `json:"cpi_victims,omitempty"`
	Suspects   []judge.Suspect   `json:"suspects"`
}

// ProofEvidence is what a proof's verdict event carries: the contention it
// answered to, where it read, and every trial.
type ProofEvidence struct {
	Before float64 `json:"before"`
	CPU    int     `json:"cpu"`
	// Kind is the probe kind read ("" = all kinds, or CPU wait).
	Kind string `json:"kind"`
	// Signal is what was read: the canary probes or the victims' CPU wait.
	Signal string `json:"signal"`
	// Carry is the evidence the proof began with: 1, or what an earlier
	// proof of the suspect left (its chain continued). With it the first
	// trial's bet is checked too (judge.ReplayFrom).
	Carry  float64       `json:"carry,omitempty"`
	Trials []judge.Trial `json:"trials"`
	// FalseConvictionBound is the evidence a conviction needs.
	FalseConvictionBound float64 `json:"false_conviction_bound"`
}

// SignalCPUWait is ProofEvidence.Signal for a proof read on the victims'
// CPU wait ("" is the canary probes).
const SignalCPUWait = signalWait

// SignalCPI is ProofEvidence.Signal for a proof read on the victims' CPI.
const SignalCPI = signalCPI
