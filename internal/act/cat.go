package act

// Resctrl classes: one crosstalk-owned control group per throttled tenant,
// holding its cache mask (CAT, this file) and its memory-bandwidth limit
// (MBA, mba.go). The class is made when the tenant is first restricted and
// removed when nothing about it is restricted any more.
//
// Coexistence: crosstalk only ever writes the schemata of the groups it
// made; the default group's and other tools' (libvirt cachetune, pqos) are
// read, never written. Their masks decide which end of the cache the
// isolated tenant gets: slot 0 is the end that overlaps other tools' masks
// (and the hardware-shared bits) least, slot 1 the other end.
//
// The way back: before the group is made, before each thread is moved,
// the state file records the group and the control group every thread came
// from (the default group, or a libvirt cachetune group). Release moves
// every thread back to where it came from, then removes the group; after
// kill -9, RestoreAll at the next start does the same from the records.

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/host"
	"github.com/crosstalk-project/crosstalk/internal/resctrl"
)

// RecordResctrlClass is the state-file section of resctrl classes, keyed
// by tenant ID.
const RecordResctrlClass = "resctrl-class"

// ClassTenant is the tenant a class is for.
type ClassTenant struct {
	ID      string
	Name    string
	Threads []int
}

// ResctrlClasses manages crosstalk's resctrl classes.
type ResctrlClasses struct {
	Host  *host.Host
	Info  resctrl.Info // resctrl.Open's answer
	State *StateFile
	Log   *slog.Logger
	// Now is the clock for records (default time.Now).
	Now func() time.Time
}

// ClassExhaustedError says a tenant could not get a class: the hardware's
// classes of service (or the RMIDs every control group also needs) are all
// taken. Nothing was changed; falling back (to CPU quota) or releasing
// another class is the caller's decision.
type ClassExhaustedError struct {
	Tenant string
	Err    *resctrl.NoSpaceError
}

func (e *ClassExhaustedError) Error() string {
	return fmt.Sprintf("no resctrl class for tenant %s: %v", e.Tenant, e.Err)
}

func (e *ClassExhaustedError) Unwrap() error { return e.Err }

// classRecord is what the state file keeps per class.
type classRecord struct {
	Tenant  string `json:"tenant"`
	Name    string `json:"name"`
	Mount   string `json:"mount"`
	Group   string `json:"group"`
	Created bool   `json:"created"`
	// Origins maps each moved thread to the control group it came from
	// ("" = the default group).
	Origins map[string]string `json:"origins"`
	// Initial is the schemata the kernel gave the group at creation, per
	// resource and domain: what "no restriction" means for it.
	Initial map[string]map[string]string `json:"initial,omitempty"`
	// Applied is what crosstalk set, per resource and domain.
	Applied map[string]map[string]string `json:"applied,omitempty"`
	Since   time.Time                    `json:"since"`
}

func (c *ResctrlClasses) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

func (c *ResctrlClasses) group(rec *classRecord) resctrl.Group {
	return resctrl.CtrlGroup(rec.Mount, rec.Group)
}

// Classed lists the tenants with a class, sorted.
func (c *ResctrlClasses) Classed() []string { return c.State.RecordKeys(RecordResctrlClass) }

func (c *ResctrlClasses) record(id string) (*classRecord, bool, error) {
	var rec classRecord
	ok, err := c.State.GetRecord(RecordResctrlClass, id, &rec)
	if err != nil || !ok {
		return nil, false, err
	}
	return &rec, true, nil
}

func (c *ResctrlClasses) put(rec *classRecord) error {
	if err := c.State.PutRecord(RecordResctrlClass, rec.Tenant, rec); err != nil {
		return fmt.Errorf("not changing resctrl for %s: cannot record the way back: %w", rec.Tenant, err)
	}
	return nil
}

// ensure returns the tenant's class, making it (record first) and moving
// the tenant's threads in.
func (c *ResctrlClasses) ensure(t ClassTenant) (*classRecord, error) {
	if c.Info.Mount == "" {
		return nil, errors.New("resctrl classes: resctrl is not mounted")
	}
	rec, ok, err := c.record(t.ID)
	if err != nil {
		return nil, err
	}
	if !ok {
		rec = &classRecord{Tenant: t.ID, Name: t.Name, Mount: c.Info.Mount,
			Group: resctrl.GroupName("class", t.ID, t.Name), Origins: map[string]string{}, Since: c.now().UTC()}
		if err := c.put(rec); err != nil {
			return nil, err
		}
	}
	g := c.group(rec)
	if !resctrl.Exists(c.Host, g) {
		if err := resctrl.Create(c.Host, g); err != nil {
			var ns *resctrl.NoSpaceError
			if errors.As(err, &ns) {
				if !rec.Created {
					c.State.ForgetRecord(RecordResctrlClass, t.ID)
				}
				return nil, &ClassExhaustedError{Tenant: t.ID, Err: ns}
			}
			return nil, err
		}
		s, err := resctrl.ReadSchemata(c.Host, g)
		if err != nil {
			return nil, err
		}
		rec.Created = true
		rec.Initial = map[string]map[string]string{}
		for _, l := range s {
			rec.Initial[l.Resource] = map[string]string{}
			for _, d := range l.Domains {
				rec.Initial[l.Resource][strconv.Itoa(d.ID)] = d.Value
			}
		}
		rec.Applied = nil
		if err := c.put(rec); err != nil {
			return nil, err
		}
	}
	return rec, c.moveThreads(rec, t.Threads)
}

// moveThreads records where the tenant's threads not yet in the class are,
// then moves them in. Threads that exited are dropped.
func (c *ResctrlClasses) moveThreads(rec *classRecord, threads []int) error {
	g := c.group(rec)
	in, err := resctrl.ReadTasks(c.Host, g)
	if err != nil {
		return err
	}
	var todo []int
	for _, tid := range threads {
		if !slices.Contains(in, tid) {
			todo = append(todo, tid)
		}
	}
	if len(todo) == 0 {
		return nil
	}
	where, err := c.locate(rec.Group)
	if err != nil {
		return err
	}
	for _, tid := range todo {
		if _, known := rec.Origins[strconv.Itoa(tid)]; !known {
			rec.Origins[strconv.Itoa(tid)] = where[tid]
		}
	}
	if err := c.put(rec); err != nil {
		return err
	}
	_, gone, err := resctrl.MoveTasks(c.Host, g, todo)
	if len(gone) > 0 {
		for _, tid := range gone {
			delete(rec.Origins, strconv.Itoa(tid))
		}
		if perr := c.put(rec); perr != nil && err == nil {
			err = perr
		}
	}
	return err
}

// locate maps every thread in a control group other than the default one
// and own to that group.
func (c *ResctrlClasses) locate(own string) (map[int]string, error) {
	ctrls, err := resctrl.CtrlGroups(c.Host, c.Info.Mount)
	if err != nil {
		return nil, err
	}
	where := map[int]string{}
	for _, name := range ctrls {
		if name == own {
			continue
		}
		tids, err := resctrl.ReadTasks(c.Host, resctrl.CtrlGroup(c.Info.Mount, name))
		if err != nil {
			continue
		}
		for _, t := range tids {
			where[t] = name
		}
	}
	return where, nil
}

// SyncThreads moves a classed tenant's new threads into its class (a no-op
// for a tenant without one). Call it every interval for classed tenants.
func (c *ResctrlClasses) SyncThreads(t ClassTenant) error {
	rec, ok, err := c.record(t.ID)
	if err != nil || !ok || !rec.Created {
		return err
	}
	if !resctrl.Exists(c.Host, c.group(rec)) {
		return fmt.Errorf("resctrl class %s of %s vanished (removed by someone else?)", rec.Group, t.ID)
	}
	return c.moveThreads(rec, t.Threads)
}

// cacheResources are the schemata lines a cache mask goes to: L3, or both
// halves under CDP.
func (c *ResctrlClasses) cacheResources() []string {
	if c.Info.CDP {
		return []string{"L3CODE", "L3DATA"}
	}
	return []string{"L3"}
}

// EndFor is the end of the cache slot uses in a domain: slot 0 the end
// overlapping least with the masks of control groups crosstalk did not make
// (the default group aside, which always spans everything) and with the
// hardware-shared bits, slot 1 the other end.
func (c *ResctrlClasses) EndFor(domain, ways, slot int) (resctrl.End, error) {
	ca := c.Info.L3
	used := ca.ShareableBits
	ctrls, err := resctrl.CtrlGroups(c.Host, c.Info.Mount)
	if err != nil {
		return 0, err
	}
	for _, name := range ctrls {
		if resctrl.IsOwned(name) {
			continue
		}
		s, err := resctrl.ReadSchemata(c.Host, resctrl.CtrlGroup(c.Info.Mount, name))
		if err != nil {
			continue
		}
		for _, res := range c.cacheResources() {
			if m, err := s.CacheMask(res, domain); err == nil {
				used |= m
			}
		}
	}
	end := ca.EndAwayFrom(used, ways)
	if slot == 1 {
		end = end.Other()
	}
	return end, nil
}

// SetCacheWays gives the tenant a class whose cache mask in domain is ways
// contiguous ways at slot's end (see EndFor): Alita's isolation, and each
// relax step. The other domains keep what the class has (the whole cache
// for a new class).
func (c *ResctrlClasses) SetCacheWays(t ClassTenant, domain, ways, slot int) error {
	if c.Info.L3 == nil {
		return errors.New("resctrl classes: no L3 cache allocation (CAT) on this host")
	}
	end, err := c.EndFor(domain, ways, slot)
	if err != nil {
		return err
	}
	mask, err := c.Info.L3.Mask(ways, end)
	if err != nil {
		return err
	}
	rec, err := c.ensure(t)
	if err != nil {
		return err
	}
	for _, res := range c.cacheResources() {
		if err := c.set(rec, res, domain, resctrl.FormatMask(mask)); err != nil {
			return err
		}
	}
	return nil
}

// ReleaseCache gives the tenant its class's initial mask in domain back;
// when nothing is restricted any more, the class is released.
func (c *ResctrlClasses) ReleaseCache(tenantID string, domain int) error {
	var res []string
	if c.Info.L3 != nil {
		res = c.cacheResources()
	}
	return c.unset(tenantID, domain, res...)
}

// set writes one resource's value in one domain, recording it first.
func (c *ResctrlClasses) set(rec *classRecord, res string, domain int, value string) error {
	if rec.Applied == nil {
		rec.Applied = map[string]map[string]string{}
	}
	if rec.Applied[res] == nil {
		rec.Applied[res] = map[string]string{}
	}
	rec.Applied[res][strconv.Itoa(domain)] = value
	if err := c.put(rec); err != nil {
		return err
	}
	return resctrl.WriteLine(c.Host, c.group(rec), resctrl.Line{Resource: res, Domains: []resctrl.Domain{{ID: domain, Value: value}}})
}

// unset puts the initial values of resources in a domain back and releases
// the class when nothing is left applied.
func (c *ResctrlClasses) unset(tenantID string, domain int, resources ...string) error {
	rec, ok, err := c.record(tenantID)
	if err != nil || !ok {
		return err
	}
	d := strconv.Itoa(domain)
	for _, res := range resources {
		if _, applied := rec.Applied[res][d]; !applied {
			continue
		}
		delete(rec.Applied[res], d)
		if len(rec.Applied[res]) == 0 {
			delete(rec.Applied, res)
		}
		if err := c.put(rec); err != nil {
			return err
		}
		if len(rec.Applied) == 0 {
			break // the release below removes the whole class
		}
		if v, ok := rec.Initial[res][d]; ok {
			if err := resctrl.WriteLine(c.Host, c.group(rec), resctrl.Line{Resource: res, Domains: []resctrl.Domain{{ID: domain, Value: v}}}); err != nil {
				return err
			}
		}
	}
	if len(rec.Applied) == 0 {
		return c.Release(tenantID)
	}
	return nil
}

// Release undoes the tenant's class: every thread in it goes back to the
// control group it came from (the default group when that group is gone,
// or for threads born inside the class: the tenant's usual origin), then
// the class is removed and forgotten.
func (c *ResctrlClasses) Release(tenantID string) error {
	rec, ok, err := c.record(tenantID)
	if err != nil || !ok {
		return err
	}
	g := c.group(rec)
	if rec.Created && resctrl.Exists(c.Host, g) {
		tids, err := resctrl.ReadTasks(c.Host, g)
		if err != nil {
			return err
		}
		fallback := usualOrigin(rec.Origins)
		back := map[string][]int{}
		for _, tid := range tids {
			origin, known := rec.Origins[strconv.Itoa(tid)]
			if !known {
				origin = fallback
			}
			if origin != "" && !resctrl.Exists(c.Host, resctrl.CtrlGroup(rec.Mount, origin)) {
				origin = ""
			}
			back[origin] = append(back[origin], tid)
		}
		var errs []error
		for _, origin := range slices.Sorted(maps.Keys(back)) {
			if _, _, err := resctrl.MoveTasks(c.Host, resctrl.CtrlGroup(rec.Mount, origin), back[origin]); err != nil {
				errs = append(errs, err)
			}
		}
		if err := errors.Join(errs...); err != nil {
			return fmt.Errorf("release resctrl class of %s: %w", tenantID, err)
		}
		if err := resctrl.Remove(c.Host, g); err != nil {
			return err
		}
	}
	return c.State.ForgetRecord(RecordResctrlClass, tenantID)
}

// usualOrigin is the control group most of the recorded threads came from.
func usualOrigin(origins map[string]string) string {
	count := map[string]int{}
	for _, o := range origins {
		count[o]++
	}
	best := ""
	for _, o := range slices.Sorted(maps.Keys(count)) {
		if count[o] > count[best] {
			best = o
		}
	}
	return best
}

// RestoreAll releases every recorded class: on a clean stop, and at start
// for whatever a killed predecessor left. A crosstalk class without a
// record (the state file was lost) is removed too, its threads going to
// the default group, so nothing is left throttled.
func (c *ResctrlClasses) RestoreAll() (restored int, err error) {
	var errs []error
	for _, id := range c.Classed() {
		if rerr := c.Release(id); rerr != nil {
			errs = append(errs, rerr)
			continue
		}
		restored++
	}
	if c.Info.Mount != "" {
		ctrls, lerr := resctrl.CtrlGroups(c.Host, c.Info.Mount)
		if lerr != nil {
			errs = append(errs, lerr)
		}
		failed := map[string]bool{}
		for _, id := range c.Classed() {
			if rec, ok, _ := c.record(id); ok {
				failed[rec.Group] = true
			}
		}
		for _, name := range ctrls {
			if !strings.HasPrefix(name, resctrl.OwnedPrefix+"class-") || failed[name] {
				continue
			}
			if c.Log != nil {
				c.Log.Warn("removing a crosstalk resctrl class without a state record; its threads go to the default group", "group", name)
			}
			if rerr := resctrl.Remove(c.Host, resctrl.CtrlGroup(c.Info.Mount, name)); rerr != nil {
				errs = append(errs, rerr)
				continue
			}
			restored++
		}
	}
	return restored, errors.Join(errs...)
}
