package act

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/cgroup"
	"github.com/crosstalk-project/crosstalk/internal/host"
	"github.com/crosstalk-project/crosstalk/internal/judge"
)

// ErrGone says the tenant's cgroup disappeared: nothing to throttle or restore.
var ErrGone = errors.New("cgroup is gone")

// ErrUnowned says a tenant already has a quota shaped like one crosstalk
// writes, and no state file entry covers it: most likely a throttle a
// killed crosstalk left behind with its record lost. Taking it for the
// tenant's original would make that throttle permanent, so crosstalk does
// not touch the tenant; `crosstalk restore --adopt` lifts it. It wraps
// ErrUnavailable, so the agent backs off instead of retrying every interval.
var ErrUnowned = fmt.Errorf("%w: quota looks like a crosstalk throttle that no state covers", ErrUnavailable)

// RecordUnownedQuota is the state file section of UnownedQuota records.
const RecordUnownedQuota = "unowned_cpu_quota"

// UnownedQuota is a crosstalk-shaped quota found on a tenant that no state
// entry covers, flagged rather than adopted as an original.
type UnownedQuota struct {
	Tenant   string    `json:"tenant"`
	QuotaUS  int64     `json:"quota_us"`
	PeriodUS int64     `json:"period_us"`
	Found    time.Time `json:"found"`
}

// ProofPeriod is the CFS period of the agent's proof caps (1 ms per CPU of
// the tenant a period): long, so that the 1 ms a period the capped suspect
// may still run (right when the cap is set, before a slot's first reading)
// is refilled in a capped slot once in sixteen trials at most (of 15 ms
// slots); and no longer, since a tenant switched from the cap to a throttle
// may wait out what is left of the cap's period before it runs again, or
// acts on a signal: SIGSTOPped right after such a switch, a busy loop on
// the dev VM read stopped 0.2–1.0 s later from a 1 s period, 0.1–0.47 s
// from this one, 0.06–0.08 s with no cap before.
const ProofPeriod = 500 * time.Millisecond

// QuotaShapes are the quotas crosstalk itself writes: duty cycles over the
// throttle period (16 ms by default, a period hardly anyone else uses) or
// over judge.DeepPeriods of it (the deep floor; any power of two of it up
// to that is taken for crosstalk's too, so a deep floor written with
// fewer periods is known as well), and
// proof caps of 1 ms per CPU over the proof period (ProofPeriod). An
// original quota of either shape is taken for a throttle left behind.
type QuotaShapes struct {
	ThrottlePeriod time.Duration
	ProofPeriod    time.Duration
	// ProofMaxQuota is the largest proof cap: 1 ms per CPU of the host.
	ProofMaxQuota time.Duration
}

// DefaultQuotaShapes are the shapes of a default configuration on this
// machine.
func DefaultQuotaShapes() QuotaShapes {
	return QuotaShapes{ThrottlePeriod: 16 * time.Millisecond, ProofPeriod: ProofPeriod,
		ProofMaxQuota: time.Duration(runtime.NumCPU()) * cgroup.MinQuota}
}

// Match reports whether q has one of crosstalk's shapes.
func (s QuotaShapes) Match(q cgroup.Quota) bool {
	switch {
	case q.Unlimited():
		return false
	case s.ThrottlePeriod > 0 && q.Period%s.ThrottlePeriod == 0 && deepMultiple(q.Period/s.ThrottlePeriod):
		return true
	case s.ProofPeriod > 0 && q.Period == s.ProofPeriod && q.Quota%cgroup.MinQuota == 0 && q.Quota <= s.ProofMaxQuota:
		return true
	}
	return false
}

// deepMultiple reports whether k periods is the throttle's own (1) or a
// deep floor's: a power of two up to judge.DeepPeriods.
func deepMultiple(k time.Duration) bool {
	return k >= 1 && k <= judge.DeepPeriods && k&(k-1) == 0
}

// CPUQuota throttles a tenant through its CFS bandwidth limit (v1
// cpu.cfs_quota_us/cfs_period_us, v2 cpu.max): the one lever every Linux host
// has. Every write is preceded by a saved intent (original, the value in
// place, the value about to be written), so whatever moment the agent dies
// at, restore knows every value the cgroup can hold as crosstalk's own.
type CPUQuota struct {
	Host   *host.Host
	Layout cgroup.Layout
	State  *StateFile
	Log    *slog.Logger
	// Journal, when set, records unowned throttles found.
	Journal *Journal
	// Shapes recognise a throttle left behind (zero: DefaultQuotaShapes).
	Shapes QuotaShapes
}

func usecs(d time.Duration) int64 {
	if d <= 0 {
		return -1
	}
	return d.Microseconds()
}

func fromUsecs(q, p int64) cgroup.Quota {
	out := cgroup.Quota{Quota: -1, Period: time.Duration(p) * time.Microsecond}
	if q > 0 {
		out.Quota = time.Duration(q) * time.Microsecond
	}
	return out
}

func (a *CPUQuota) log() *slog.Logger {
	if a.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return a.Log
}

func (a *CPUQuota) shapes() QuotaShapes {
	if a.Shapes == (QuotaShapes{}) {
		return DefaultQuotaShapes()
	}
	return a.Shapes
}

func (a *CPUQuota) read(g *cgroup.Group, cgroupPath string) (cgroup.Quota, error) {
	cur, err := g.CPUQuota()
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return cur, ErrGone
		}
		return cur, fmt.Errorf("read quota of %s: %w", cgroupPath, err)
	}
	return cur, nil
}

// Apply sets the tenant's quota. Before writing it saves the intent: the
// original (on the first write), the value in place now and the value about
// to be written. A tenant found at a crosstalk-shaped quota that no entry
// covers is flagged (ErrUnowned) and left alone.
//
// Apply, Restore and RestoreAll take a context for the callers that also
// drive LibvirtQuota, whose calls can block; a cgroup file write cannot, so
// they do not consult it (a restore must go through regardless).
func (a *CPUQuota) Apply(_ context.Context, cgroupPath, tenant string, q cgroup.Quota) error {
	g, e, err := a.intent(cgroupPath, tenant, q)
	if err != nil {
		return err
	}
	if err := a.State.Put(e); err != nil {
		return fmt.Errorf("not throttling %s: cannot record its original quota: %w", cgroupPath, err)
	}
	if err := g.SetCPUQuota(q); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			a.State.Forget(cgroupPath)
			return ErrGone
		}
		// The intent stays: restore recognises both values, and the next
		// Apply reads which one is in place.
		return fmt.Errorf("throttle %s: %w", cgroupPath, err)
	}
	return nil
}

// intent reads a cgroup's quota and returns the entry Apply saves before
// writing q.
func (a *CPUQuota) intent(cgroupPath, tenant string, q cgroup.Quota) (*cgroup.Group, Entry, error) {
	if err := q.Validate(); err != nil {
		return nil, Entry{}, err
	}
	if !ValidCgroupPath(cgroupPath) {
		return nil, Entry{}, fmt.Errorf("not throttling %q: not a clean absolute cgroup path", cgroupPath)
	}
	g := cgroup.Open(a.Host, a.Layout, cgroupPath)
	cur, err := a.read(g, cgroupPath)
	if err != nil {
		if errors.Is(err, ErrGone) {
			a.State.Forget(cgroupPath)
		}
		return nil, Entry{}, err
	}
	curQ, curP := usecs(cur.Quota), cur.Period.Microseconds()
	e, known := a.State.Get(cgroupPath)
	if !known {
		// Freed a moment ago and still at the original that entry holds
		// (a proof's next trial): the same intent again, which the disk
		// already has.
		if l, ok := a.State.Lingering(cgroupPath); ok && curQ == l.OriginalQuotaUS && curP == l.OriginalPeriodUS {
			e, known = l, true
		}
	}
	switch {
	case !known:
		if a.shapes().Match(cur) {
			return nil, Entry{}, a.flagUnowned(cgroupPath, tenant, cur)
		}
		e = Entry{Cgroup: cgroupPath, Tenant: tenant, OriginalQuotaUS: curQ, OriginalPeriodUS: curP, Since: time.Now().UTC()}
	case !e.Ours(curQ, curP):
		// Someone set a limit of their own while crosstalk held the
		// tenant: that is what it goes back to.
		a.log().Warn("quota changed by someone else while throttled; it is the value restored later", "cgroup", cgroupPath, "now", cur.String())
		e.OriginalQuotaUS, e.OriginalPeriodUS = curQ, curP
	}
	e.AppliedQuotaUS, e.AppliedPeriodUS = curQ, curP
	e.NextQuotaUS, e.NextPeriodUS = usecs(q.Quota), q.Period.Microseconds()
	return g, e, nil
}

// Intent is a quota about to be applied to a tenant's cgroup.
type Intent struct {
	Cgroup, Tenant string
	Quota          cgroup.Quota
}

// Intend saves, in one write, the intents of several Applies, so that the
// Applies that follow find them saved and only write the cgroups: a
// start-up survey caps every busy tenant at once, and one save instead of
// one a tenant keeps the first capped from waiting out the others' saves.
// A cgroup whose intent cannot be formed (gone, unowned) is left to its
// Apply, which reports it.
func (a *CPUQuota) Intend(intents []Intent) error {
	var entries []Entry
	for _, in := range intents {
		if _, e, err := a.intent(in.Cgroup, in.Tenant, in.Quota); err == nil {
			entries = append(entries, e)
		}
	}
	if err := a.State.PutAll(entries); err != nil {
		return fmt.Errorf("recording the original quotas of %d tenant(s): %w", len(entries), err)
	}
	return nil
}

// flagUnowned records (once) and reports a crosstalk-shaped quota no entry
// covers.
func (a *CPUQuota) flagUnowned(cgroupPath, tenant string, cur cgroup.Quota) error {
	var prev UnownedQuota
	ok, _ := a.State.GetRecord(RecordUnownedQuota, cgroupPath, &prev)
	if !ok || prev.QuotaUS != usecs(cur.Quota) || prev.PeriodUS != cur.Period.Microseconds() {
		u := UnownedQuota{Tenant: tenant, QuotaUS: usecs(cur.Quota), PeriodUS: cur.Period.Microseconds(), Found: time.Now().UTC()}
		if err := a.State.PutRecord(RecordUnownedQuota, cgroupPath, u); err != nil {
			a.log().Error("cannot record an unowned throttle", "cgroup", cgroupPath, "err", err)
		}
		detail := fmt.Sprintf("%s is at %s, shaped like a crosstalk throttle, and no state covers it: not adopted as its original; `crosstalk restore --adopt` lifts it", cgroupPath, cur)
		a.log().Warn("unowned throttle: quota looks like crosstalk's but no state covers it; leaving the tenant alone", "cgroup", cgroupPath, "tenant", tenant, "quota", cur.String())
		if a.Journal != nil {
			a.Journal.Write(Event{Kind: "unowned", Lever: "cpu_quota", Tenant: tenant, Detail: detail})
		}
	}
	return fmt.Errorf("not throttling %s (%s): %w", tenant, cur, ErrUnowned)
}

// FlagIfUnowned checks a tenant not throttled by this agent for a
// crosstalk-shaped quota no entry covers, and flags it; it reports whether
// it did. The agent runs it over the tenants it finds at start.
func (a *CPUQuota) FlagIfUnowned(cgroupPath, tenant string) bool {
	if _, known := a.State.Get(cgroupPath); known || !ValidCgroupPath(cgroupPath) || a.recorded(cgroupPath) {
		return false
	}
	cur, err := a.read(cgroup.Open(a.Host, a.Layout, cgroupPath), cgroupPath)
	if err != nil || !a.shapes().Match(cur) {
		return false
	}
	a.flagUnowned(cgroupPath, tenant, cur)
	return true
}

// recorded says another actuator's record covers the cgroup (a VM
// throttled through libvirt, whose quota sits in the domain's cgroups): its
// quota is crosstalk's, and that actuator restores it.
func (a *CPUQuota) recorded(cgroupPath string) bool {
	for _, kind := range a.State.RecordKinds() {
		if kind == RecordUnownedQuota {
			continue
		}
		for _, key := range a.State.RecordKeys(kind) {
			if key == cgroupPath || strings.HasPrefix(cgroupPath, key+"/") || strings.HasPrefix(key, cgroupPath+"/") {
				return true
			}
		}
	}
	return false
}

// Outcome is what restoring one cgroup came to.
type Outcome string

// The outcomes of restoring one cgroup.
const (
	// Restored: its original value was written back.
	Restored Outcome = "restored"
	// Unchanged: it already had its original value (crosstalk died before
	// its first write landed).
	Unchanged Outcome = "unchanged"
	// Foreign: someone else changed it since crosstalk wrote it; left as
	// it is.
	Foreign Outcome = "foreign"
	// Gone: the cgroup no longer exists.
	Gone Outcome = "gone"
)

// Restore puts the tenant's original quota back and forgets it. A value
// that is not crosstalk's (an operator's change made while the tenant was
// throttled) is left as it is, as `crosstalk restore` leaves it.
//
// The entry of a quota written back is forgotten without a save
// (StateFile.ForgetLater): the tenant is free at once, the agent is not
// held up by an fsync, and a proof's next cap finds its intent still on
// disk. Flush, or the next save, drops it; until then restore after a
// crash finds the cgroup at its original value and leaves it.
func (a *CPUQuota) Restore(_ context.Context, cgroupPath string) error {
	_, err := a.restore(cgroupPath, false)
	return err
}

// Flush saves the removals Restore left unsaved: the agent calls it when
// no proof is under way, and RestoreEach at its end.
func (a *CPUQuota) Flush() error { return a.State.Flush() }

// restore writes a cgroup's original quota back; durable forgets its entry
// with a save, else with ForgetLater.
func (a *CPUQuota) restore(cgroupPath string, durable bool) (Outcome, error) {
	e, ok := a.State.Get(cgroupPath)
	if !ok {
		return Unchanged, nil
	}
	g := cgroup.Open(a.Host, a.Layout, cgroupPath)
	cur, err := a.read(g, cgroupPath)
	switch {
	case errors.Is(err, ErrGone):
		return Gone, a.State.Forget(cgroupPath)
	case err != nil:
		return "", fmt.Errorf("restore %s: %w", cgroupPath, err)
	}
	curQ, curP := usecs(cur.Quota), cur.Period.Microseconds()
	switch {
	case curQ == e.OriginalQuotaUS && curP == e.OriginalPeriodUS:
		return Unchanged, a.State.Forget(cgroupPath)
	case !e.Ours(curQ, curP) && !e.mixed(curQ, curP):
		a.log().Warn("quota changed by someone else since crosstalk set it; leaving it", "cgroup", cgroupPath, "now", cur.String())
		return Foreign, a.State.Forget(cgroupPath)
	}
	if err := g.SetCPUQuota(fromUsecs(e.OriginalQuotaUS, e.OriginalPeriodUS)); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return Gone, a.State.Forget(cgroupPath)
		}
		return "", fmt.Errorf("restore %s: %w", cgroupPath, err)
	}
	if !durable {
		a.State.ForgetLater(cgroupPath)
		return Restored, nil
	}
	return Restored, a.State.Forget(cgroupPath)
}

// mixed reports whether a value is half of one of crosstalk's values and
// half of another: a v1 cgroup has its period and quota in two files, and
// crosstalk may die between the two writes.
func (e Entry) mixed(quotaUS, periodUS int64) bool {
	quotas := []int64{e.OriginalQuotaUS, e.AppliedQuotaUS}
	periods := []int64{e.OriginalPeriodUS, e.AppliedPeriodUS}
	if e.NextPeriodUS != 0 {
		quotas, periods = append(quotas, e.NextQuotaUS), append(periods, e.NextPeriodUS)
	}
	return slices.Contains(quotas, quotaUS) && slices.Contains(periods, periodUS)
}

// RestoreResult sorts the entries of a restore by outcome (cgroup paths).
type RestoreResult struct {
	Restored  []string `json:"restored,omitempty"`
	Unchanged []string `json:"unchanged,omitempty"`
	Foreign   []string `json:"foreign,omitempty"`
	Gone      []string `json:"gone,omitempty"`
	// Unsaved lists entries dealt with (their outcome is above) whose
	// removal from the state file could not be saved: they stay on disk,
	// and a later restore finds them moot.
	Unsaved []string `json:"unsaved,omitempty"`
	// Failed lists entries that could not be restored; the error says why.
	Failed []string `json:"failed,omitempty"`
}

// RestoreEach restores every cgroup in the state file: on a clean stop, and
// at start-up for whatever a killed predecessor left. A cgroup whose quota
// was changed by someone else since crosstalk wrote it is left as it is.
func (a *CPUQuota) RestoreEach() (RestoreResult, error) {
	var res RestoreResult
	var errs []error
	for _, e := range a.State.Entries() {
		out, err := a.restore(e.Cgroup, true)
		switch {
		case err != nil && out == "":
			res.Failed = append(res.Failed, e.Cgroup)
			errs = append(errs, err)
			continue
		case err != nil:
			res.Unsaved = append(res.Unsaved, e.Cgroup)
			errs = append(errs, err)
		}
		switch out {
		case Restored:
			res.Restored = append(res.Restored, e.Cgroup)
		case Unchanged:
			res.Unchanged = append(res.Unchanged, e.Cgroup)
		case Foreign:
			res.Foreign = append(res.Foreign, e.Cgroup)
		case Gone:
			res.Gone = append(res.Gone, e.Cgroup)
		}
	}
	// Entries Restore forgot without a save leave the disk too.
	if err := a.State.Flush(); err != nil {
		errs = append(errs, err)
	}
	return res, errors.Join(errs...)
}

// RestoreAll is RestoreEach counting the cgroups written back.
func (a *CPUQuota) RestoreAll(_ context.Context) (restored int, err error) {
	res, err := a.RestoreEach()
	return len(res.Restored), err
}

// AdoptUnowned lifts the unowned throttles the state file flags: a cgroup
// still at the flagged value gets no limit (its original is unknown; no
// limit is the kernel's default), one changed since is left as it is. Each
// record is forgotten once dealt with.
func (a *CPUQuota) AdoptUnowned() (RestoreResult, error) {
	var res RestoreResult
	var errs []error
	for _, key := range a.State.RecordKeys(RecordUnownedQuota) {
		var u UnownedQuota
		if _, err := a.State.GetRecord(RecordUnownedQuota, key, &u); err != nil || !ValidCgroupPath(key) {
			res.Failed = append(res.Failed, key)
			errs = append(errs, fmt.Errorf("unowned record %q: bad record (%v)", key, err))
			continue
		}
		g := cgroup.Open(a.Host, a.Layout, key)
		cur, err := a.read(g, key)
		var out Outcome
		switch {
		case errors.Is(err, ErrGone):
			out = Gone
		case err != nil:
			res.Failed = append(res.Failed, key)
			errs = append(errs, err)
			continue
		case usecs(cur.Quota) != u.QuotaUS || cur.Period.Microseconds() != u.PeriodUS:
			out = Foreign
		default:
			if err := g.SetCPUQuota(cgroup.Quota{Quota: -1, Period: 100 * time.Millisecond}); err != nil {
				res.Failed = append(res.Failed, key)
				errs = append(errs, fmt.Errorf("adopt %s: %w", key, err))
				continue
			}
			out = Restored
		}
		switch out {
		case Restored:
			res.Restored = append(res.Restored, key)
		case Foreign:
			res.Foreign = append(res.Foreign, key)
		case Gone:
			res.Gone = append(res.Gone, key)
		}
		if err := a.State.ForgetRecord(RecordUnownedQuota, key); err != nil {
			res.Unsaved = append(res.Unsaved, key)
			errs = append(errs, err)
		}
	}
	return res, errors.Join(errs...)
}
