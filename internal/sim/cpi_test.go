package sim

import (
	"strings"
	"testing"
)

// runNoneAndCrosstalk runs a scenario file, edited, under no policy and
// under crosstalk.
func runNoneAndCrosstalk(t *testing.T, file string, edit func(*Scenario)) (none, ct *PolicyResult) {
	t.Helper()
	sc, err := Load(file)
	if err != nil {
		t.Fatal(err)
	}
	edit(sc)
	res, err := Run(t.Context(), sc, Options{Policies: []string{PolicyNone, PolicyCrosstalk}})
	if err != nil {
		t.Fatal(err)
	}
	none, _ = res.Policy(PolicyNone)
	ct, _ = res.Policy(PolicyCrosstalk)
	return none, ct
}

// named is whom a policy named a polluter, by tenant name.
func named(r *PolicyResult) map[string]bool {
	out := map[string]bool{}
	for _, tr := range r.Tenants {
		out[tr.Name] = tr.NamedPolluter
	}
	return out
}

// slowdown is a tenant's slowdown under a policy.
func slowdown(t *testing.T, r *PolicyResult, name string) float64 {
	t.Helper()
	for _, tr := range r.Tenants {
		if tr.Name == name && tr.Slowdown != nil {
			return *tr.Slowdown
		}
	}
	t.Fatalf("no slowdown for %s", name)
	return 0
}

// A memory-bandwidth polluter that the canary's DRAM probe barely moves for
// is caught from its victim's cycles per instruction where a PMU counts
// them, and only it; with the CPI signal off, nothing catches it.
func TestCPICatchesAPolluterTheProbesMiss(t *testing.T) {
	run := func(t *testing.T, cpi bool) (*PolicyResult, *PolicyResult) {
		return runNoneAndCrosstalk(t, "testdata/cpi-membw.yaml", func(sc *Scenario) { sc.Agent.CPI.Enabled = &cpi })
	}

	t.Run("on", func(t *testing.T) {
		none, ct := run(t, true)
		if n := named(ct); !n["streamer"] || n["victim"] || n["busy"] {
			t.Errorf("named polluters %v, want the streamer only", n)
		}
		provedOnCPI := false
		for _, a := range ct.Actions {
			if a.Tenant == "streamer" && a.Kind == "proof" && strings.Contains(a.Reason, "CPI: victim runs at") {
				provedOnCPI = true
			}
			if a.Tenant != "streamer" && a.Kind == "proof" {
				t.Errorf("an innocent proved: %+v", a)
			}
		}
		if !provedOnCPI {
			t.Errorf("the streamer was not proved on the victim's CPI: %+v", ct.Actions)
		}
		if n, c := slowdown(t, none, "victim"), slowdown(t, ct, "victim"); n < 1.2 || c > 1.12 {
			t.Errorf("victim %.2f× under no policy, %.2f× under crosstalk; want at least 1.2× and at most 1.12×", n, c)
		}
		if len(ct.LeftThrottled) > 0 {
			t.Errorf("left throttled: %v", ct.LeftThrottled)
		}
	})
	t.Run("off", func(t *testing.T) {
		_, ct := run(t, false)
		if n := named(ct); n["streamer"] {
			t.Errorf("the streamer was named with CPI off: the probes caught it, so this scenario does not test CPI")
		}
	})
}

// The same streamer already running when the agent starts: every CPI
// baseline would be learned under it. The start-up survey caps it for a
// moment, starts the victim's baseline from its CPI without it, and the
// usual proof convicts it; with the survey off, nothing does.
func TestCPISurveyFindsAPolluterAlreadyRunning(t *testing.T) {
	run := func(t *testing.T, survey bool) (*PolicyResult, *PolicyResult) {
		return runNoneAndCrosstalk(t, "testdata/cpi-membw-running.yaml", func(sc *Scenario) { sc.Agent.CPI.Survey = &survey })
	}
	t.Run("on", func(t *testing.T) {
		none, ct := run(t, true)
		if n := named(ct); !n["streamer"] || n["victim"] || n["busy"] {
			t.Errorf("named polluters %v, want the streamer only", n)
		}
		surveyed := false
		for _, a := range ct.Actions {
			if a.Tenant == "streamer" && strings.HasPrefix(a.Reason, "start-up CPI survey") {
				surveyed = true
			}
			if a.Tenant == "busy" && a.Quota > 0 {
				t.Errorf("the cache-friendly bystander was capped: %+v", a)
			}
		}
		if !surveyed {
			t.Errorf("no start-up survey of the streamer: %+v", ct.Actions)
		}
		n, c := slowdown(t, none, "victim"), slowdown(t, ct, "victim")
		if n < 1.2 || c > 1+(n-1)/2 {
			t.Errorf("victim %.2f× under no policy, %.2f× under crosstalk; want at least 1.2× and half of it gone", n, c)
		}
		if len(ct.LeftThrottled) > 0 {
			t.Errorf("left throttled: %v", ct.LeftThrottled)
		}
	})
	t.Run("off", func(t *testing.T) {
		_, ct := run(t, false)
		if named(ct)["streamer"] {
			t.Errorf("the streamer was named with the survey off: something else caught it, so this scenario does not test the survey")
		}
	})
}
