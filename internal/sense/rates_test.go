package sense

import (
	"testing"
	"time"
)

func TestRates(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	base := TenantStats{At: t0, Usage: time.Second, Throttled: 100 * time.Millisecond, PSISome: 200 * time.Millisecond, HasPSI: true}
	for _, tc := range []struct {
		name string
		cur  TenantStats
		want TenantRates
		ok   bool
	}{
		{
			name: "every counter over two seconds",
			cur: TenantStats{At: t0.Add(2 * time.Second), Usage: 2 * time.Second, Throttled: 500 * time.Millisecond,
				PSISome: 600 * time.Millisecond, HasPSI: true, RunDelayRate: 0.3},
			want: TenantRates{Span: 2, Usage: 0.5, Throttled: 0.2, PSI: 0.2, RunDelay: 0.3}, ok: true,
		},
		{
			name: "no PSI now: none rated",
			cur:  TenantStats{At: t0.Add(time.Second), Usage: 3 * time.Second, Throttled: 100 * time.Millisecond},
			want: TenantRates{Span: 1, Usage: 2}, ok: true,
		},
		{
			name: "counters that went back rate 0",
			cur:  TenantStats{At: t0.Add(time.Second), HasPSI: true},
			want: TenantRates{Span: 1}, ok: true,
		},
		{
			name: "the run delay is its own window's rate, whatever the span",
			cur:  TenantStats{At: t0.Add(500 * time.Millisecond), Usage: time.Second, Throttled: 100 * time.Millisecond, RunDelayRate: 1.5},
			want: TenantRates{Span: 0.5, RunDelay: 1.5}, ok: true,
		},
		{name: "no time passed", cur: TenantStats{At: t0, Usage: 2 * time.Second}},
		{name: "time went back", cur: TenantStats{At: t0.Add(-time.Second), Usage: 2 * time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := Rates(base, tc.cur)
			if ok != tc.ok || !near(got.Span, tc.want.Span) || !near(got.Usage, tc.want.Usage) || !near(got.Throttled, tc.want.Throttled) ||
				!near(got.PSI, tc.want.PSI) || !near(got.RunDelay, tc.want.RunDelay) {
				t.Errorf("Rates = %+v, %v; want %+v, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
	// PSI in the previous sample only is no rate either.
	cur := TenantStats{At: t0.Add(time.Second), PSISome: time.Second, HasPSI: true}
	if r, _ := Rates(TenantStats{At: t0}, cur); r.PSI != 0 {
		t.Errorf("PSI rated without PSI in the previous sample: %v", r.PSI)
	}
}

func TestWaitWindow(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	for _, tc := range []struct {
		name      string
		cur       TenantStats
		ends      bool
		want      WaitWindow
		ok        bool
		wantMarkU time.Duration
	}{
		{
			name: "run delay read at this sample: a window of four seconds ends",
			cur:  TenantStats{At: t0.Add(4 * time.Second), Usage: 3 * time.Second, RunDelayAt: t0.Add(4 * time.Second), RunDelayRate: 0.75},
			ends: true, want: WaitWindow{Usage: 0.5, Delay: 0.75}, ok: true, wantMarkU: 3 * time.Second,
		},
		{
			name: "run delay carried over from an earlier read: no window ends",
			cur:  TenantStats{At: t0.Add(4 * time.Second), Usage: 3 * time.Second, RunDelayAt: t0.Add(3 * time.Second), RunDelayRate: 0.75},
			want: WaitWindow{Usage: 0.5, Delay: 0.75}, ok: true, wantMarkU: 3 * time.Second,
		},
		{
			name: "run delay never read",
			cur:  TenantStats{At: t0.Add(time.Second), Usage: 2 * time.Second},
			want: WaitWindow{Usage: 1}, ok: true, wantMarkU: 2 * time.Second,
		},
		{
			name: "CPU time that went back uses none",
			cur:  TenantStats{At: t0.Add(time.Second), RunDelayAt: t0.Add(time.Second), RunDelayRate: 0.1},
			ends: true, want: WaitWindow{Delay: 0.1}, ok: true,
		},
		{
			name: "no time since the mark",
			cur:  TenantStats{At: t0, Usage: 2 * time.Second, RunDelayAt: t0},
			ends: true, wantMarkU: 2 * time.Second,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.cur.EndsWaitWindow(); got != tc.ends {
				t.Errorf("EndsWaitWindow = %v, want %v", got, tc.ends)
			}
			mark := DelayMark{At: t0, Usage: time.Second}
			got, ok := WaitSince(mark, tc.cur)
			if ok != tc.ok || !near(got.Usage, tc.want.Usage) || !near(got.Delay, tc.want.Delay) {
				t.Errorf("WaitSince = %+v, %v; want %+v, %v", got, ok, tc.want, tc.ok)
			}
			if m := tc.cur.Mark(); !m.At.Equal(tc.cur.At) || m.Usage != tc.wantMarkU {
				t.Errorf("Mark = %+v, want at %v with %v used", m, tc.cur.At, tc.wantMarkU)
			}
		})
	}
}
