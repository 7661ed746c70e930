package api

import "fmt"

// ActionKind is what an action did to a tenant.
type ActionKind string

// The kinds of action the agent records (and counts in actions_total).
const (
	// KindThrottle starts holding a tenant back.
	KindThrottle ActionKind = "throttle"
	// KindTighten and KindRelax move a held tenant one step down or up.
	KindTighten ActionKind = "tighten"
	KindRelax   ActionKind = "relax"
	// KindRelease lets a tenant go: no policy's hold through that lever remains.
	KindRelease ActionKind = "release"
	// KindProof caps a suspect for a proof (or one trial of it); KindProofFree
	// frees it for the trial's other half.
	KindProof     ActionKind = "proof"
	KindProofFree ActionKind = "proof-free"
	// KindIsolate confines a tenant to fewer LLC ways.
	KindIsolate ActionKind = "isolate"
)

// Policy is what decided an action or holds a tenant back.
type Policy string

// The policies. The power policy holds a tenant per socket: its holds are
// named by PowerSocketPolicy.
const (
	// PolicyProbe is the perturbation proof and the duty controller of
	// proven polluters.
	PolicyProbe Policy = "probe"
	// PolicyBusLocks is the bus-lock budget (PMU counts).
	PolicyBusLocks Policy = "buslocks"
	// PolicyPermits is the pollution permits (LLC misses per unhalted time).
	PolicyPermits Policy = "permits"
	// PolicyPower is the socket power budget.
	PolicyPower Policy = "power"
	// PolicyLLC is LLC isolation (CAT ways); PolicyMBA memory bandwidth
	// allocation.
	PolicyLLC Policy = "llc"
	PolicyMBA Policy = "mba"
)

// PowerSocketPolicy is the power policy's hold on the tenant's CPUs of one
// socket: per-CPU levers act per socket, and a tenant may span two.
func PowerSocketPolicy(socket int) Policy { return Policy(fmt.Sprintf("%s:%d", PolicyPower, socket)) }

// Lever is what a policy acts through.
type Lever string

// The levers.
const (
	LeverCPUQuota        Lever = "cpu_quota"
	LeverClockModulation Lever = "clock_modulation"
	LeverCPUFreq         Lever = "cpufreq"
	LeverCAT             Lever = "cat"
	LeverMBA             Lever = "mba"
)
