package sense

// Kyoto's LLC pollution rate (Tchana et al., "Mitigating performance
// unpredictability in the IaaS using the Kyoto principle", Middleware 2016,
// equation 1, after Tang, Mars and Soffa, EXADAPT 2011):
//
//	llc_cap_act = llc_misses × cpu_freq_khz / unhalted_core_cycles
//
// misses per cycle times cycles per millisecond: LLC misses per millisecond
// of the tenant's running time. Kyoto shows it ranks how aggressive a VM is
// towards its neighbours better than raw LLC misses (Kendall's tau, §4.2),
// because it does not reward a polluter for being descheduled.
//
// Which frequency: the paper names only cpu_freq_khz; its machine is a
// Xeon E5-1603 v3 at 2.8 GHz, a part without Turbo Boost, so there the
// nominal, maximum and running frequency are one number. crosstalk uses the
// nominal (base) frequency, a per-host constant: the rate then stays "misses
// per millisecond of busy time at nominal speed", comparable across tenants
// and unchanged when a frequency cap (crosstalk's own power throttling
// included) changes how fast the cycles tick. NominalFreq says where the
// number came from.

import (
	"errors"
	"fmt"
	"math"
	"path"
	"regexp"
	"strconv"
	"strings"

	"github.com/crosstalk-project/crosstalk/internal/host"
)

// PollutionRate is llc_cap_act for llcMisses and unhaltedCycles counted over
// the same time (totals or per-second rates alike: the time cancels) at a
// nominal frequency of cpuFreqKHz. ok is false when there is nothing to
// divide by (the tenant did not run) or an input is not a finite,
// non-negative number.
func PollutionRate(llcMisses, unhaltedCycles, cpuFreqKHz float64) (rate float64, ok bool) {
	for _, v := range []float64{llcMisses, unhaltedCycles, cpuFreqKHz} {
		if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			return 0, false
		}
	}
	if unhaltedCycles == 0 || cpuFreqKHz == 0 {
		return 0, false
	}
	return llcMisses * cpuFreqKHz / unhaltedCycles, true
}

// TenantPollution is PollutionRate from one tenant's perf rates (events per
// second, as PerfCounters.Read returns them): llc_misses and cycles. ok is
// false when either event was not counted (Zen 1 has no llc_misses; no PMU).
func TenantPollution(rates map[string]float64, cpuFreqKHz float64) (float64, bool) {
	m, okM := rates[EventLLCMisses]
	c, okC := rates[EventCycles]
	if !okM || !okC {
		return 0, false
	}
	return PollutionRate(m, c, cpuFreqKHz)
}

// Sources of NominalFreq, best first.
const (
	FreqFromBaseFrequency = "cpufreq base_frequency"          // intel_pstate (HWP)
	FreqFromAMDPstate     = "cpufreq amd_pstate_nominal_freq" // amd-pstate
	FreqFromModelName     = "/proc/cpuinfo model name"        // Intel prints the nominal speed, "@ 2.80GHz"
	FreqFromACPIMax       = "cpufreq cpuinfo_max_freq (acpi-cpufreq P0)"
	FreqFromCPUMHz        = "/proc/cpuinfo cpu MHz (current speed: a fallback)"
)

var modelGHz = regexp.MustCompile(`@\s*([0-9]+(?:\.[0-9]+)?)\s*GHz`)

// NominalFreq returns the CPUs' nominal (base) frequency in kHz and where it
// was read, trying in order: cpufreq's base_frequency (intel_pstate with
// HWP) and amd_pstate_nominal_freq; the "@ x.xxGHz" Intel puts in the
// model name; cpuinfo_max_freq under acpi-cpufreq, whose table tops out at
// P0, the nominal state (boost states are not listed; under intel_pstate
// cpuinfo_max_freq is the turbo maximum, so it is not used there); and last
// /proc/cpuinfo's "cpu MHz", the current speed of CPU 0, said so in source.
func NominalFreq(h *host.Host) (khz int64, source string, err error) {
	policies, _ := h.Glob(CPUFreqDir + "/policy[0-9]*")
	for _, f := range []struct{ file, source string }{
		{"base_frequency", FreqFromBaseFrequency},
		{"amd_pstate_nominal_freq", FreqFromAMDPstate},
	} {
		for _, p := range policies {
			if v, err := h.ReadInt(path.Join(p, f.file)); err == nil && v > 0 {
				return v, f.source, nil
			}
		}
	}
	info, ierr := h.ReadString("/proc/cpuinfo")
	var mhz float64
	if ierr == nil {
		for _, line := range strings.Split(info, "\n") {
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			switch strings.TrimSpace(k) {
			case "model name":
				if m := modelGHz.FindStringSubmatch(v); m != nil {
					if g, err := strconv.ParseFloat(m[1], 64); err == nil && g > 0 {
						return int64(math.Round(g * 1e6)), FreqFromModelName, nil
					}
				}
			case "cpu MHz":
				if mhz == 0 {
					mhz, _ = strconv.ParseFloat(strings.TrimSpace(v), 64)
				}
			}
		}
	}
	for _, p := range policies {
		drv, _ := h.ReadString(path.Join(p, "scaling_driver"))
		if drv != "acpi-cpufreq" {
			continue
		}
		if v, err := h.ReadInt(path.Join(p, "cpuinfo_max_freq")); err == nil && v > 0 {
			return v, FreqFromACPIMax, nil
		}
	}
	if mhz > 0 {
		return int64(math.Round(mhz * 1000)), FreqFromCPUMHz, nil
	}
	if ierr != nil {
		return 0, "", fmt.Errorf("nominal CPU frequency: no cpufreq base frequency and %w", ierr)
	}
	return 0, "", errors.New("nominal CPU frequency: neither cpufreq nor /proc/cpuinfo says it")
}
