package agent

// Beats delivers a beat after each pass of Run's loop (an interval, a
// watch, a proof sample, a reload): a service manager's watchdog is fed
// from it, so a loop that hangs stops feeding it. Beats do not queue: a
// reader that falls behind sees one for any number of passes.
func (a *Agent) Beats() <-chan struct{} { return a.beats }

// beat notes a pass of the loop without ever blocking it.
func (a *Agent) beat() {
	select {
	case a.beats <- struct{}{}:
	default:
	}
}
