package sense

import (
	"cmp"
	"errors"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/host"
	"github.com/crosstalk-project/crosstalk/internal/topology"
)

// Temperatures is one reading of the CPU temperature sensors, in °C.
type Temperatures struct {
	// CPU is each CPU's core temperature, where the hardware has per-core
	// sensors (Intel coretemp); SMT siblings read their core's sensor.
	CPU map[int]float64 `json:"cpu,omitempty"`
	// Package is each package's temperature (coretemp "Package id N",
	// k10temp Tdie or Tctl).
	Package map[int]float64 `json:"package,omitempty"`
	// Source is the hwmon driver: "coretemp" or "k10temp".
	Source string `json:"source"`
	// PerCoreReason says why CPU is empty (AMD k10temp has no per-core
	// sensors), so temperature cannot tell tenants of one package apart.
	PerCoreReason string `json:"per_core_reason,omitempty"`
}

// tempSensor is one hwmon temperature input and what it measures.
type tempSensor struct {
	input string     // .../tempK_input, millidegrees Celsius
	pkg   int        // package it belongs to
	cpus  cpuset.Set // CPUs of the core it measures; empty for a package sensor
}

// TemperatureReader reads the CPU temperature sensors the hwmon class
// offers: Intel's coretemp (one device per package: "Package id P" and
// "Core C" inputs, C the core_id within the package) and AMD's k10temp
// (one device per socket: Tctl, Tdie and one Tccd per core complex die).
//
// What temperature can and cannot attribute: a core's temperature rises
// with the power it burns, so among cores of one package it ranks which
// work is power-hungry (an AVX power virus runs hotter than an integer loop
// at the same busy time), which busy time alone cannot. It cannot separate
// SMT siblings (one sensor per core), it lags the load by the thermal time
// constant (hundreds of milliseconds to seconds), heat spreads to the
// neighbouring cores, and the sensors read in whole degrees. k10temp's per-
// CCD sensors are numbered by physical CCD slot, which on parts with fused-
// off CCDs cannot be matched to an L3 domain from sysfs, so on AMD
// temperature is per package only: it says that a socket is hot, not who
// heats it.
type TemperatureReader struct {
	h       *host.Host
	source  string
	sensors []tempSensor
	reason  string
}

// NewTemperatureReader finds the sensors; the error says why there are none.
func NewTemperatureReader(h *host.Host, topo *topology.Topology) (*TemperatureReader, error) {
	if topo == nil {
		return nil, errors.New("no CPU temperatures: the CPU topology is unknown")
	}
	devs, err := h.Glob("/sys/class/hwmon/hwmon[0-9]*")
	if err != nil || len(devs) == 0 {
		return nil, errors.New("no CPU temperatures: no /sys/class/hwmon devices (a VM, or the coretemp/k10temp module is not loaded)")
	}
	// hwmonN numbers follow probe order, which is package order for both
	// drivers; sort numerically, not as strings (hwmon10 after hwmon9).
	slices.SortFunc(devs, func(a, b string) int { return cmp.Compare(hwmonIndex(a), hwmonIndex(b)) })
	r := &TemperatureReader{h: h}
	var k10 []string
	for _, d := range devs {
		dir := d
		name, err := h.ReadString(dir + "/name")
		if err != nil { // kernels before 3.15 kept the attributes under device/
			dir = d + "/device"
			if name, err = h.ReadString(dir + "/name"); err != nil {
				continue
			}
		}
		switch name {
		case "coretemp":
			r.source = "coretemp"
			r.addCoretemp(dir, topo)
		case "k10temp":
			k10 = append(k10, dir)
		}
	}
	if r.source == "" && len(k10) > 0 {
		r.source = "k10temp"
		r.reason = "AMD k10temp has no per-core sensors (Tctl/Tdie per socket, Tccd per core complex die, numbered by physical slot): temperature says which socket is hot, not which tenant"
		if len(k10) != len(topo.Packages) {
			return nil, fmt.Errorf("no CPU temperatures: %d k10temp devices for %d packages, cannot tell which socket each measures", len(k10), len(topo.Packages))
		}
		for i, dir := range k10 {
			r.addK10temp(dir, topo.Packages[i].ID)
		}
	}
	if len(r.sensors) == 0 {
		return nil, errors.New("no CPU temperatures: no coretemp or k10temp hwmon device with readable inputs (modprobe coretemp or k10temp)")
	}
	return r, nil
}

func hwmonIndex(p string) int {
	n, _ := strconv.Atoi(strings.TrimPrefix(path.Base(p), "hwmon"))
	return n
}

// tempInputs lists a hwmon device's temperature inputs with their labels.
func (r *TemperatureReader) tempInputs(dir string) map[string]string {
	out := map[string]string{}
	inputs, _ := r.h.Glob(dir + "/temp[0-9]*_input")
	for _, in := range inputs {
		label, err := r.h.ReadString(strings.TrimSuffix(in, "_input") + "_label")
		if err != nil {
			continue
		}
		out[label] = in
	}
	return out
}

func (r *TemperatureReader) addCoretemp(dir string, topo *topology.Topology) {
	in := r.tempInputs(dir)
	pkg := -1
	for label := range in {
		if s, ok := strings.CutPrefix(label, "Package id "); ok {
			if n, err := strconv.Atoi(s); err == nil {
				pkg = n
			}
		}
	}
	if pkg < 0 {
		if r.reason == "" {
			r.reason = fmt.Sprintf("coretemp device %s has no \"Package id\" input, so its cores cannot be placed", r.h.Path(dir))
		}
		return
	}
	for label, input := range in {
		if label == fmt.Sprintf("Package id %d", pkg) {
			r.sensors = append(r.sensors, tempSensor{input: input, pkg: pkg})
			continue
		}
		s, ok := strings.CutPrefix(label, "Core ")
		if !ok {
			continue
		}
		core, err := strconv.Atoi(s)
		if err != nil {
			continue
		}
		var cpus []int
		for _, c := range topo.CPUs {
			if c.Package == pkg && c.Core == core {
				cpus = append(cpus, c.ID)
			}
		}
		if len(cpus) > 0 {
			r.sensors = append(r.sensors, tempSensor{input: input, pkg: pkg, cpus: cpuset.Of(cpus...)})
		}
	}
}

func (r *TemperatureReader) addK10temp(dir string, pkg int) {
	in := r.tempInputs(dir)
	// Tdie is the die's temperature; Tctl is the fan-control value, offset
	// on some parts, so only a fallback.
	for _, label := range []string{"Tdie", "Tctl"} {
		if input, ok := in[label]; ok {
			r.sensors = append(r.sensors, tempSensor{input: input, pkg: pkg})
			return
		}
	}
}

// Source is the driver read ("coretemp", "k10temp").
func (r *TemperatureReader) Source() string { return r.source }

// Read reads every sensor. A sensor that fails is left out; the errors are
// returned joined with what could be read.
func (r *TemperatureReader) Read() (Temperatures, error) {
	t := Temperatures{Source: r.source, PerCoreReason: r.reason, Package: map[int]float64{}}
	var errs []error
	for _, s := range r.sensors {
		milli, err := r.h.ReadInt(s.input)
		if err != nil {
			errs = append(errs, fmt.Errorf("temperature: %w", err))
			continue
		}
		c := float64(milli) / 1000
		if s.cpus.IsEmpty() {
			t.Package[s.pkg] = c
			continue
		}
		if t.CPU == nil {
			t.CPU = map[int]float64{}
		}
		for _, cpu := range s.cpus.List() {
			t.CPU[cpu] = c
		}
	}
	if t.CPU == nil && t.PerCoreReason == "" {
		t.PerCoreReason = "no per-core temperature inputs could be read"
	}
	return t, errors.Join(errs...)
}
