package cli

import (
	"io"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// progress is a bar of planned measured time with an ETA, on stderr while
// that is a terminal: long lab and sim work says how far along it is. A nil
// *progress draws nothing, so callers need not check.
type progress struct {
	bar *progressbar.ProgressBar
}

// progress returns a bar over total for what, or nil when stderr is not a
// terminal or the output is JSON (a script reading it wants no redraws).
func (g *globals) progress(total time.Duration, what string, asJSON bool) *progress {
	f, ok := g.errOut.(*os.File)
	if asJSON || !ok || !term.IsTerminal(int(f.Fd())) {
		return nil
	}
	return newProgress(g.errOut, total, what)
}

// newProgress draws on w whatever w is; its unit is the millisecond of
// planned time, which the bar shows only as a fraction and an ETA.
func newProgress(w io.Writer, total time.Duration, what string) *progress {
	if total <= 0 {
		return nil
	}
	return &progress{bar: progressbar.NewOptions64(total.Milliseconds(),
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription(what),
		progressbar.OptionSetWidth(30),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionSetElapsedTime(true),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionClearOnFinish(),
		progressbar.OptionSetRenderBlankState(true),
	)}
}

// add moves the bar by d of planned time.
func (p *progress) add(d time.Duration) {
	if p == nil {
		return
	}
	p.bar.Add64(d.Milliseconds())
}

// clear takes the bar off its line so that a line of output can be written
// there; the next add draws it again.
func (p *progress) clear() {
	if p != nil {
		p.bar.Clear()
	}
}

// finish fills the bar and removes it.
func (p *progress) finish() {
	if p != nil {
		p.bar.Finish()
	}
}
