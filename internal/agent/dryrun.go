package agent

import (
	"context"

	"github.com/crosstalk-project/crosstalk/internal/act"
	"github.com/crosstalk-project/crosstalk/internal/cgroup"
	"github.com/crosstalk-project/crosstalk/internal/cpuset"
)

// In dry run the arbiter writes through these actuators: they take every
// write and make none, so the arbiter's bookkeeping (what it holds each
// tenant to, the classes it made) runs as it would for real.

type dryQuota struct{}

func (dryQuota) Apply(context.Context, string, string, cgroup.Quota) error { return nil }
func (dryQuota) Restore(context.Context, string) error                     { return nil }
func (dryQuota) RestoreAll(context.Context) (int, error)                   { return 0, nil }

type dryLever struct{ steps int }

func (dryLever) Apply(context.Context, string, cpuset.Set, int) error { return nil }
func (dryLever) Restore(context.Context, cpuset.Set) error            { return nil }
func (l dryLever) Steps() int                                         { return l.steps }

type dryClasses struct{}

func (dryClasses) SetCacheWays(act.ClassTenant, int, int, int) error         { return nil }
func (dryClasses) ReleaseCache(string, int) error                            { return nil }
func (dryClasses) SetBandwidth(act.ClassTenant, int, float64, float64) error { return nil }
func (dryClasses) ReleaseBandwidth(string, int) error                        { return nil }
func (dryClasses) SyncThreads(act.ClassTenant) error                         { return nil }
func (dryClasses) Classed() []string                                         { return nil }
func (dryClasses) RestoreAll() (int, error)                                  { return 0, nil }
