package act

// MBA on crosstalk's resctrl classes (cat.go has the class itself).
//
// Units differ by vendor, and the judge speaks in fractions of the
// unthrottled rate:
//
//   - Intel: the MB value is a percentage of the core's unthrottled
//     bandwidth, applied in steps of bandwidth_gran from min_bandwidth
//     (the kernel rounds a request up to the next step; so do we, so that
//     what is recorded is what the hardware applies): fraction × 100.
//   - AMD: the MB value is an absolute limit in 1/8 GB/s (2048 means
//     unlimited): fraction × the tenant's bandwidth when it was first
//     throttled (the judge's reference), in those units (GB taken as 10^9
//     bytes; AMD's documents do not say).
//   - mba_MBps mount option (Intel's software controller): MBps, fraction ×
//     reference in MiB/s.

import (
	"errors"
	"fmt"
	"math"
	"strconv"
)

// amdUnitBytes is one unit of AMD's MB value: 1/8 GB/s.
const amdUnitBytes = 1e9 / 8

// MBValue is the MB schemata value for a rate: fraction of the unthrottled
// rate, reference the bytes/s that fraction is of (needed for AMD and
// MBps).
func (c *ResctrlClasses) MBValue(fraction, referenceBytesPerSec float64) (int, error) {
	mb := c.Info.MB
	if mb == nil {
		return 0, errors.New("resctrl classes: no memory-bandwidth allocation (MBA) on this host")
	}
	if fraction <= 0 || math.IsNaN(fraction) {
		return 0, fmt.Errorf("MBA rate %v: must be positive", fraction)
	}
	if fraction >= 1 {
		return mb.Max, nil
	}
	switch mb.Units {
	case "percent":
		return mb.Round(int(math.Ceil(fraction*100 - 1e-9))), nil
	case "1/8GBps", "MBps":
		if referenceBytesPerSec <= 0 {
			return 0, fmt.Errorf("MBA in %s needs the tenant's bandwidth as reference, got %v", mb.Units, referenceBytesPerSec)
		}
		unit := amdUnitBytes
		if mb.Units == "MBps" {
			unit = 1 << 20
		}
		return mb.Round(int(math.Ceil(fraction * referenceBytesPerSec / unit))), nil
	}
	return 0, fmt.Errorf("MBA units %q unknown", mb.Units)
}

// SetBandwidth limits the tenant's memory bandwidth in domain to fraction
// of its unthrottled rate (referenceBytesPerSec: its bandwidth when first
// throttled), giving it a class if it has none. A fraction of 1 or more is
// ReleaseBandwidth.
func (c *ResctrlClasses) SetBandwidth(t ClassTenant, domain int, fraction, referenceBytesPerSec float64) error {
	if fraction >= 1 {
		return c.ReleaseBandwidth(t.ID, domain)
	}
	v, err := c.MBValue(fraction, referenceBytesPerSec)
	if err != nil {
		return err
	}
	rec, err := c.ensure(t)
	if err != nil {
		return err
	}
	return c.set(rec, "MB", domain, strconv.Itoa(v))
}

// ReleaseBandwidth gives the tenant its class's initial MB value in domain
// back (unthrottled); when nothing is restricted any more, the class is
// released.
func (c *ResctrlClasses) ReleaseBandwidth(tenantID string, domain int) error {
	return c.unset(tenantID, domain, "MB")
}
