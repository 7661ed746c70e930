package sim

import (
	"path"
	"strings"
	"syscall"

	"github.com/crosstalk-project/crosstalk/internal/host"
)

// simKernel is the simulated host's kernel side (host.Kernel), one for
// the whole tree: it routes each mkdir, rmdir and write by path to the
// emulation of the filesystem mounted there — cgroupfs (CgroupFS), resctrl
// (internal/resctrl/resctrlfs), the cpufreq policy files (cpufreqFS) —
// refuses writes an MSR device would refuse, and tells the simulator what
// changed so it re-reads only that lever. Everything else is a plain file.
type simKernel struct {
	cgroups *CgroupFS
	resctrl host.Kernel // nil on a machine without resctrl
	cpufreq *cpufreqFS  // nil on a machine without cpufreq
	changed func(p string)
}

func (k *simKernel) route(p string) host.Kernel {
	switch {
	case k.cgroups.Owns(p):
		return k.cgroups
	case k.resctrl != nil && (p == resctrlRoot || strings.HasPrefix(p, resctrlRoot+"/")):
		return k.resctrl
	case k.cpufreq != nil && k.cpufreq.Owns(p):
		return k.cpufreq
	}
	return nil
}

func (k *simKernel) Mkdir(h *host.Host, p string) error {
	var err error
	if r := k.route(p); r != nil {
		err = r.Mkdir(h, p)
	}
	if err == nil {
		k.changed(p)
	}
	return err
}

func (k *simKernel) Write(h *host.Host, p string, data []byte) (bool, error) {
	// /dev/cpu/N/msr is written with pwrite at the register's offset; a
	// plain write lands at offset 0 (MSR 0, which no one may write).
	if strings.HasPrefix(p, "/dev/cpu/") && path.Base(p) == "msr" {
		return true, pathErr("write", h, p, syscall.EIO)
	}
	handled := false
	var err error
	if r := k.route(p); r != nil {
		handled, err = r.Write(h, p, data)
	}
	if err == nil {
		// A plain write has not happened yet when handled is false: the
		// simulator reads the lever at its next step, after host.WriteFile
		// returned.
		k.changed(p)
	}
	return handled, err
}

func (k *simKernel) Remove(h *host.Host, p string) (bool, error) {
	handled := false
	var err error
	if r := k.route(p); r != nil {
		handled, err = r.Remove(h, p)
	}
	if err == nil {
		k.changed(p)
	}
	return handled, err
}
