// Package sim is crosstalk's simulated host (`crosstalk sim`): a machine and
// its tenants declared in YAML, a contention model, and the production agent
// run against them on virtual time.
//
// # The simulated host
//
// Each policy run builds a host tree in a temporary directory (memory-backed
// /dev/shm when there is one): procfs and sysfs topology, /proc/cpuinfo with
// the declared CPU model's identity (which the agent's PMU table keys on),
// mountinfo, a cgroup2 tree with the tenants in the places libvirt
// (machine.slice/machine-qemu\x2dN\x2dNAME.scope/libvirt/vcpuK) and docker
// (system.slice/docker-ID.scope) put them, and, where the machine has them,
// resctrl, powercap RAPL zones, cpufreq policies, coretemp hwmon and
// /dev/cpu/N/msr. A host.Kernel (simKernel) routes each mkdir, rmdir and
// write by path to the emulation of what is mounted there: CgroupFS for
// cgroupfs, internal/resctrl/resctrlfs for resctrl (the emulation the
// resctrl actuator and sensor tests use: CLOSIDs, RMIDs and limbo, the
// kernel's schemata validation and layout), cpufreqFS for the cpufreq
// policies (requests resolved as cpufreq_set_policy does), and EIO for a
// plain write to an MSR device (the real lever is a pwrite at 0x19A).
//
// The agent is built with agent.BuildWith over that tree, with the
// simulator's PerfOpener (perfOpener: the cgroup directory the agent opens is
// mapped back to its tenant; events are recognised by the encodings of the
// declared CPU model), its canary probe (simProber: readings from the model)
// and a virtual clock, and driven by Agent.Tick. Each step the simulator
// reads the levers the actuators wrote (cpu.max; from the resctrl
// emulation, the CLOSID and RMID of each tenant thread and each CLOSID's
// cache mask and MB value; scaling_max_freq; the 8 bytes of MSR 0x19A),
// solves the model, accumulates the counters, and before each agent
// interval writes what the sensors read (cpu.stat, cpu.pressure,
// /proc/TID/schedstat, /proc/stat, energy_uj, hwmon temperatures,
// scaling_cur_freq) and hands the resctrl emulation each RMID's occupancy
// and memory traffic (resctrlfs.FS.Account), which renders mon_data. Where
// the CPU detects split or bus locks, each step also appends the kernel's
// reports of the locking threads to dev/kmsg (kmsg.go).
//
// components_test.go is the contract with the hardware components:
// each production sensor and actuator (sense.ResctrlMonitor,
// act.ResctrlClasses, sense.PowerSensor, act.ClockModulation, act.CPUFreq,
// sense.PerfCounters with sense.PerfEventsFor's events) driven directly on
// a scenario's host reads what the model computed and moves the model.
//
// # The contention model
//
// Work is measured in CPU-seconds of a tenant's ideal execution (alone, at
// the maximum frequency, nothing contended). A tenant's time per unit of
// work is
//
//	τ = (1-m)·C + m·M/M₀
//
// where m is its memory_bound (the fraction of its ideal time spent waiting
// on the LLC and DRAM), C its compute factor and M/M₀ its memory stall
// against the ideal. Its progress is the CPU time it gets divided by τ; its
// slowdown is its progress alone on the same machine over its progress
// co-located, integrated over the run. Declared rates (LLC references, bus
// locks) are what the tenant does alone; co-located they scale with its
// progress relative to solo, which feeds back into the contention: each
// step solves that fixed point.
//
//   - CPU time: each tenant's demand (cpu × vCPUs, capped by its CFS quota)
//     is spread over its CPUs; an oversubscribed CPU is shared
//     max-min fairly, as CFS shares it among tenants of equal weight;
//     the rest waits (run delay, PSI).
//   - Compute factor C: fmax / (f × clock-modulation duty), times
//     1 + smtPenalty × (the SMT sibling's busy fraction).
//   - Frequency: a socket whose power — idle power plus Σ per-CPU dynamic
//     power × (f/fmax)^powerExponent × duty — exceeds its TDP runs every
//     core at the frequency that fits (bisection); scaling_max_freq caps
//     single CPUs below that. A throttled power virus lets the socket rise.
//   - LLC: per socket, CAT masks split the ways into regions shared by the
//     tenants whose masks cover them (the default group covers all); in
//     each region Che's approximation gives the characteristic time T at
//     which the distinct lines touched fill it, Σ ws·(1-exp(-a·T/ws)) = C,
//     and a tenant's hit ratio is 1-exp(-a·T/ws) (capped at hitCeiling),
//     its occupancy ws·hit. Streaming insertion pressure thus evicts a
//     cache-resident neighbour.
//   - DRAM bandwidth: misses × 64 B per socket; the loaded-latency factor is
//     1 + bwQueueing·ρ/(1-ρ) for utilisation ρ ≤ bwMaxUtilisation, demand
//     beyond it slows every tenant's DRAM time in proportion; Intel MBA caps
//     a tenant at pct% × coreBandwidth per core, AMD MBA at value × 1/8 GB/s
//     per group and domain.
//   - Bus locks: the host-wide rate R gives a memory-system occupancy
//     U = min((R/busLockSaturation)^busLockExponent, busLockMaxOccupancy);
//     every LLC hit and DRAM access of every tenant takes 1/(1-U) as long.
//   - Memory stall M = Σ over sockets of [hit·llcCycles + (1-hit)·dramCycles·
//     bandwidth factor]/(1-U); M₀ is the ideal's (alone, whole LLC).
//
// Counters per tenant follow: task clock = CPU time; cycles = CPU time ×
// frequency × duty; instructions = work × fmax × (computeIPC·(1-m) +
// stallIPC·m), so CPI rises under contention; LLC references and bus locks
// = declared × progress/solo; LLC misses = references × (1-hit).
//
// The canary probe reads, on its CPU: the locked add at probeLockNs ×
// fmax/(f×duty) × (1 + probeLockBusShare·U); the LLC walk with the hit ratio
// of a line reused after one walk of its buffer against the socket's T, and
// 1 + probeLLCLockShare·(1/(1-U)-1) of the bus-lock stall; the DRAM chase at
// dramCycles × bandwidth factor / (1-U). Readings and counters carry
// multiplicative log-normal noise (Scenario.Noise) from seeded generators:
// a run is deterministic for its seed, apart from what the agent itself does
// on wall time (its 60 ms probe timeout).
//
// The constants and their sources are in model.go; the calibration points
// are tested in model_test.go.
package sim
